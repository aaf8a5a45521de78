"""What planner prints and draws: the evaluate report, the search and sweep tables, the run
block, the timeline and the plots."""


def counted(n: int, noun: str, plural: str = "") -> str:
    """"1 row", "117 rows", "1,024 steps": the count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
