"""The built-in "rubrics" benchmark: users whose preferences are checkable rubrics.

``aspects`` holds the checkers (and pole-moving text transforms), ``users`` the rubric users and
``prompts`` the everyday questions they ask; ``reachability`` measures which wants a pool of generations
meets (every user's wants are reachable in the default run's pool, ``default_pool.jsonl``). Because every
rubric requirement is checked by code, downstream generation quality on this benchmark is exact: no LLM
judge is involved.
"""
