"""Reward models: one small interface (fit / adapt / score), frozen-feature methods, baselines."""
