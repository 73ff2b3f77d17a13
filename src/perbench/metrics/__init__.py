"""Metrics: upstream (RM accuracy, policy accuracy) and downstream (rubric satisfaction, ROUGE, BERTScore)."""
