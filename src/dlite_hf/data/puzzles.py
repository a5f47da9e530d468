"""Generated source ``puzzles``, the mix's ``reasoning`` domain: eight kinds of seeded arithmetic and logic puzzle,
3,000 of each (the same items on every run), one group per puzzle."""

from __future__ import annotations

import random

from .common import Prompt, prompt, user

# the rows' `source`, as mixes already built carry it
_SOURCE_LABEL = "dlite_hf.broad_mix (seeded)"

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kira", "Luis", "Mei", "Noor")
_ITEMS = ("apples", "books", "stamps", "marbles", "tickets", "coins", "shells", "pencils", "cards", "plants")
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _puzzle(rng: random.Random, kind: int) -> str:
    if kind == 0:
        a, b, c = rng.randint(5, 90), rng.randint(2, 9), rng.randint(1, 40)
        n, m = rng.sample(_NAMES, 2)
        item = rng.choice(_ITEMS)
        return (
            f"{n} has {a} {item}. {m} has {b} times as many, then gives away {c}. How many {item} do they have "
            "together now? Reason step by step."
        )
    if kind == 1:
        values = [rng.randint(-99, 999) for _ in range(rng.randint(6, 12))]
        order = rng.choice(("ascending", "descending"))
        return f"Sort these numbers in {order} order and explain how you checked it: {', '.join(map(str, values))}."
    if kind == 2:
        a, x, b = rng.randint(2, 12), rng.randint(-20, 20), rng.randint(-50, 50)
        return f"Solve for x: {a}x + ({b}) = {a * x + b}. Show each step and check the answer."
    if kind == 3:
        start, offset = rng.choice(_DAYS), rng.randint(3, 400)
        return f"Today is {start}. What day of the week is it {offset} days from now? Explain the calculation."
    if kind == 4:
        a, b = rng.randint(12, 999), rng.randint(12, 999)
        return f"Find the greatest common divisor of {a} and {b} with the Euclidean algorithm, step by step."
    if kind == 5:
        word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 12)))
        letter = rng.choice(word)
        return f"How many times does the letter '{letter}' occur in the string '{word}'? Go letter by letter."
    if kind == 6:
        km = rng.randint(3, 500)
        return f"Convert {km} kilometres to miles (1 mile = 1.609 km) and to metres. Show the working."
    rows = rng.randint(3, 5)
    people = rng.sample(_NAMES, rows)
    ages = [rng.randint(8, 70) for _ in people]
    facts = "; ".join(f"{p} is {a}" for p, a in zip(people, ages))
    return f"{facts}. Who is the oldest, who is the youngest, and what is the mean age? Reason step by step."


_PUZZLE_KINDS = 8
_PUZZLES_PER_KIND = 3000


def reasoning() -> list[tuple[str, list[Prompt]]]:
    out = []
    for kind in range(_PUZZLE_KINDS):
        rng = random.Random(1000 + kind)
        for index in range(_PUZZLES_PER_KIND):
            gid = f"reasoning/{kind}/{index}"
            out.append((gid, [prompt(gid, "reasoning", _SOURCE_LABEL, [user(_puzzle(rng, kind))])]))
    return out
