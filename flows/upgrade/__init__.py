"""Upgrade routes between two generations: a bridge fitted and measured, every route measured and the
rule that chooses one."""
