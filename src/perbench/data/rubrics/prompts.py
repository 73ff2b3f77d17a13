"""Everyday questions for the rubrics benchmark: 64 prompts over 8 topics, split 48 train / 16 test, and 48 more
test prompts (6 per topic) that only the large edition of the benchmark asks (``load_rubrics(size="large")``).

Each question is self-contained, needs no current facts, and can be answered well in 40-200 words, so
every rubric (short or long, listed or not, ...) can be met. Within each topic of eight questions the
4th and 8th are test prompts, which spreads the test split evenly over the topics. The large edition's
questions (``p65``-``p112``) come after the default's, so the default prompts keep their ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from perbench.data.records import PreferencePair


@dataclass(frozen=True)
class RubricPrompt:
    prompt_id: str
    text: str
    split: Literal["train", "test"]


_TOPICS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "cooking",
        (
            "How do I keep rice from turning sticky when I cook it on the stove?",
            "What is a simple way to make a weeknight pasta sauce from pantry staples?",
            "How can I tell when a steak is cooked to medium without cutting it open?",
            "What should I do if I have added too much salt to a pot of soup?",
            "How do I store fresh herbs so they stay usable for longer?",
            "What is the difference between baking soda and baking powder in recipes?",
            "How can I make scrambled eggs that stay soft and creamy?",
            "What are some good habits for preparing work lunches ahead of time for the week?",
        ),
    ),
    (
        "travel",
        (
            "How should I pack a carry-on bag for a week-long trip?",
            "What can I do to feel less jet-lagged after a long flight?",
            "How do I choose a good neighborhood to stay in when visiting a new city?",
            "What should I keep in mind when taking a long train ride with a young child?",
            "How can I avoid losing my passport or wallet while traveling?",
            "What is a sensible way to plan a road trip with a group of friends?",
            "How do I stay reasonably comfortable on an overnight bus ride?",
            "What are good ways to spend less on food while traveling?",
        ),
    ),
    (
        "money",
        (
            "How do I start a monthly budget if I have never made one before?",
            "What is an emergency fund, and how much should I try to keep in it?",
            "How can I cut down on impulse purchases when shopping online?",
            "Should I pay off my smallest debts first or the ones with the highest interest rate?",
            "How can roommates split shared household costs fairly?",
            "What are simple ways to lower my grocery bill?",
            "How can I manage my spending when my freelance income changes from month to month?",
            "What should I check before signing up for a new subscription service?",
        ),
    ),
    (
        "health habits",
        (
            "How can I get into the habit of drinking more water during the day?",
            "What can I do to fall asleep more easily at night?",
            "How do I start running if I have not exercised in years?",
            "What can I do to reduce eye strain from long hours at a screen?",
            "How can I make healthier snack choices during the workday?",
            "What is a good way to stretch after sitting at a desk for a long time?",
            "How do I stick to a consistent morning routine?",
            "How can I use short breaks during the day to feel less stressed?",
        ),
    ),
    (
        "home",
        (
            "How do I get rid of a musty smell in a closet?",
            "What is the best way to clean a greasy stovetop?",
            "How can I keep my houseplants alive while I am away for a week?",
            "How should I prepare a small garden bed for planting in spring?",
            "How do I organize a cluttered kitchen drawer?",
            "How can I make a small apartment feel more spacious?",
            "What is a simple way to clear a slow-draining bathroom sink?",
            "How often should I wash my bed sheets and towels?",
        ),
    ),
    (
        "tech help",
        (
            "How do I create a strong password that I can still remember?",
            "What should I check when my laptop suddenly becomes very slow?",
            "How can I back up the photos on my phone?",
            "How do I improve a weak Wi-Fi signal at home?",
            "What is two-factor authentication, and should I turn it on?",
            "How can I cut down on distracting notifications on my phone?",
            "How do I recognize a phishing email?",
            "What should I do before selling or giving away an old phone?",
        ),
    ),
    (
        "learning and work",
        (
            "How can I learn vocabulary in a new language more effectively?",
            "What is a good way to prepare for a job interview?",
            "How do I stay focused when studying at home?",
            "How should I write a polite email asking a colleague for help?",
            "How can I give feedback to a coworker without sounding harsh?",
            "What is a practical way to plan out a week of tasks?",
            "How do I get more comfortable speaking up in meetings?",
            "How can I take better notes during lectures or talks?",
        ),
    ),
    (
        "relationships and hobbies",
        (
            "How do I keep in touch with friends who live far away?",
            "What is a kind way to say no to a favor I do not have time for?",
            "How can I start learning the guitar as an adult?",
            "What are good ways to meet new people after moving to a new town?",
            "How can I apologize to a friend after an argument?",
            "How do I get started with sketching if I feel I cannot draw?",
            "What is a relaxing hobby I could take up on weekends?",
            "How can I plan a low-cost birthday celebration for a friend?",
        ),
    ),
)

#: the large edition's extra test questions, six per topic (in ``_TOPICS`` order); ids continue after the default's
_MORE: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "cooking",
        (
            "How do I keep a cutting board clean and free of odors?",
            "What is an easy way to roast vegetables so they come out crisp?",
            "How can I use up leftover bread before it goes stale?",
            "What should I keep in mind when cooking a meal for someone with a food allergy?",
            "How do I make a basic vinaigrette for salads?",
            "How can I tell whether the eggs in my fridge are still fresh?",
        ),
    ),
    (
        "travel",
        (
            "How should I prepare for a long day of sightseeing on foot?",
            "What can I do if my luggage does not arrive at the airport?",
            "How do I find reasonably priced flights for a holiday trip?",
            "What should I pack for a weekend camping trip?",
            "How can I get around a city where I do not speak the language?",
            "What is a good way to keep travel documents organized?",
        ),
    ),
    (
        "money",
        (
            "How can I save money on my electricity bill at home?",
            "What should I think about before lending money to a friend?",
            "How do I keep track of where my money goes each month?",
            "What is a sensible way to save for a large purchase like a new laptop?",
            "How can I avoid late fees on my bills?",
            "What should I look for when comparing two job offers with different pay and benefits?",
        ),
    ),
    (
        "health habits",
        (
            "How can I cut back on how much coffee I drink each day?",
            "What can I do to keep my posture better while working at a laptop?",
            "How do I build a simple stretching routine for the evening?",
            "What are some ways to spend less time on my phone before bed?",
            "How can I remember to take regular walks during a busy week?",
            "What can I do to make my bedroom better for sleeping?",
        ),
    ),
    (
        "home",
        (
            "How do I remove a coffee stain from a carpet?",
            "What is a good way to keep a refrigerator organized?",
            "How can I keep my windows from fogging up in winter?",
            "What should I do to prepare my home before leaving for a long trip?",
            "How do I get rid of fruit flies in the kitchen?",
            "What is a simple weekly cleaning routine for a small flat?",
        ),
    ),
    (
        "tech help",
        (
            "How can I free up storage space on my phone?",
            "What should I do if I forget the password to an important account?",
            "How do I keep my laptop battery healthy over the years?",
            "What is a safe way to use public Wi-Fi at a cafe?",
            "How can I organize the files and folders on my computer?",
            "What should I check before installing a new app on my phone?",
        ),
    ),
    (
        "learning and work",
        (
            "How can I stop putting off tasks I find boring?",
            "What is a good way to prepare slides for a short presentation?",
            "How do I ask my manager for a day off politely?",
            "How can I keep learning new skills while working full time?",
            "What is a practical way to handle a very full email inbox?",
            "How do I introduce myself well on the first day at a new job?",
        ),
    ),
    (
        "relationships and hobbies",
        (
            "How can I make a good impression when meeting my partner's family?",
            "What is a fun way to start a book club with friends?",
            "How do I get started with growing herbs on a windowsill?",
            "What can I do to support a friend who is going through a hard time?",
            "How can I plan a relaxing day at home on my own?",
            "What is a good way to start learning to take better photos with my phone?",
        ),
    ),
)


def _build() -> tuple[tuple[RubricPrompt, ...], tuple[RubricPrompt, ...], dict[str, str]]:
    prompts: list[RubricPrompt] = []
    topics: dict[str, str] = {}
    for topic, questions in _TOPICS:
        for i, question in enumerate(questions):
            prompt_id = f"p{len(prompts) + 1:02d}"
            prompts.append(RubricPrompt(prompt_id, question, "test" if i % 4 == 3 else "train"))
            topics[prompt_id] = topic
    more: list[RubricPrompt] = []
    for topic, questions in _MORE:
        for question in questions:
            prompt_id = f"p{len(prompts) + len(more) + 1:02d}"
            more.append(RubricPrompt(prompt_id, question, "test"))
            topics[prompt_id] = topic
    return tuple(prompts), tuple(more), topics


RUBRIC_PROMPTS: tuple[RubricPrompt, ...]  # the default benchmark's prompts
MORE_PROMPTS: tuple[RubricPrompt, ...]  # the large edition's extra test prompts
PROMPT_TOPICS: dict[str, str]  # prompt_id -> topic, for both
RUBRIC_PROMPTS, MORE_PROMPTS, PROMPT_TOPICS = _build()


def edition_prompts(size: str = "default") -> tuple[RubricPrompt, ...]:
    """The prompts of an edition of the benchmark: ``default`` (64: 48 train / 16 test) or ``large`` (those and
    the 48 extra test prompts: 48 train / 64 test)."""
    return RUBRIC_PROMPTS + MORE_PROMPTS if size == "large" else RUBRIC_PROMPTS


#: two rephrasings of every test question, same request in other words: the rubric checkers read only the answer,
#: so a pair's label is the same under every phrasing (paraphrase consistency has an exact target)
PARAPHRASES: dict[str, tuple[str, ...]] = {
    "p04": (
        "My pot of soup came out far too salty. How can I fix it?",
        "Is there a way to rescue soup that I over-salted?",
    ),
    "p08": (
        "What routines help when I want to prep my work lunches for the whole week in advance?",
        "How do I get into a good rhythm of making my weekday work lunches ahead of time?",
    ),
    "p12": (
        "I am going on a long train journey with a small child. What should I think about?",
        "Any advice for spending many hours on a train with a little kid?",
    ),
    "p16": (
        "How can I keep my food costs down when I am on a trip?",
        "What are some ways to eat cheaply while travelling?",
    ),
    "p20": (
        "When paying down debt, is it better to clear the smallest balances or the highest-interest ones first?",
        "Which debts should I tackle first: the small ones or those with the biggest interest rate?",
    ),
    "p24": (
        "Before I subscribe to a new service, what should I look at?",
        "What is worth checking before I commit to another monthly subscription?",
    ),
    "p28": (
        "My eyes get tired after hours in front of a screen. What can I do about it?",
        "How can I ease eye strain when I spend long days looking at a monitor?",
    ),
    "p32": (
        "What can I do in short breaks during my day to reduce stress?",
        "How do I make the most of brief pauses in the day to feel calmer?",
    ),
    "p36": (
        "What steps should I take to get a small garden bed ready for spring planting?",
        "How do I get a little garden plot ready before I plant in the spring?",
    ),
    "p40": (
        "How frequently should bed sheets and towels go in the wash?",
        "What is a sensible schedule for washing towels and bedding?",
    ),
    "p44": (
        "The Wi-Fi signal in my home is weak. How can I make it better?",
        "What can I do to get stronger Wi-Fi coverage around the house?",
    ),
    "p48": (
        "I am about to sell or give away my old phone. What should I do first?",
        "What steps should I take before passing an old phone on to someone else?",
    ),
    "p52": (
        "How do I word a courteous email to ask a coworker for help?",
        "What is a polite way to write to a colleague when I need their help?",
    ),
    "p56": (
        "How do I improve the notes I take in lectures and talks?",
        "What can I do to take more useful notes while listening to a lecture or talk?",
    ),
    "p60": (
        "I just moved to a new town. How can I meet new people?",
        "What are some ways to make new acquaintances after relocating to another town?",
    ),
    "p64": (
        "How can I organise a birthday celebration for a friend without spending much?",
        "What is a cheap way to plan a friend's birthday party?",
    ),
}


def paraphrased_pairs(pairs: Sequence[PreferencePair], n: int) -> list[PreferencePair]:
    """Each test pair asked again under the first ``n`` paraphrases of its prompt (ids ``<pair id>~k``, meta
    ``paraphrase_of`` = the original pair id): same user, chosen, rejected and label. A mirrored pair's paraphrases
    are mirrored too, so every user-agnostic scorer still gets exactly ½ on them."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 2:
        raise ValueError(f"paraphrases: expected an integer in 0..2, got {n!r}")
    by_text = {p.text: p.prompt_id for p in RUBRIC_PROMPTS}
    out = []
    for p in pairs:
        pid = by_text.get(p.prompt) if isinstance(p.prompt, str) else None
        if p.split != "test" or pid not in PARAPHRASES:
            continue
        for k, text in enumerate(PARAPHRASES[pid][:n], 1):
            meta = {**p.meta, "paraphrase_of": p.pair_id, "paraphrase": k}
            out.append(replace(p, pair_id=f"{p.pair_id}~{k}", prompt=text, meta=meta))
    return out
