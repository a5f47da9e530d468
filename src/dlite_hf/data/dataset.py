"""The regenerated dataset kept in the repository (``dlite-hf dataset``): the target's responses as token ids, never
third-party text, in parquet shards `data/<split>-NNNNN.parquet` under 40 MB. A row (:data:`COLUMNS`) holds its
prompt's id, domain, source and `prompt_sha256`; :func:`rebuild_rows` rebuilds the prompts from the wheels and checks
them against the hash."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..chat_template import chat_prompt_ids
from ..jsonl import read_jsonl
from .regenerate import response_row
from .sources import SOURCES

SHARD_ROWS = 25_000  # about 10-20 MB of parquet at a few hundred tokens a response: well under 40 MB a shard
MAX_SHARD_BYTES = 40 * 1024 * 1024
COLUMNS = (
    "id",
    "prompt_id",
    "domain",
    "source",
    "prompt_sha256",
    "prompt_tokens",
    "response_ids",
    "finished",
    "sampling",
    "engine",
)


def _arrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as error:
        raise ImportError(
            "The regenerated dataset is parquet: install pyarrow (`pip install -e .[train]` installs it)."
        ) from error
    return pa, pq


def prompt_sha256(prompt_ids: Iterable[int]) -> str:
    """The hash a rebuilt prompt is checked against: sha256 of its token ids, comma-separated."""
    return hashlib.sha256(",".join(str(int(t)) for t in prompt_ids).encode()).hexdigest()


def read_shards(folder: str | Path) -> list[dict[str, Any]]:
    """Every row of the dataset at `folder` (its `data/*.parquet`), in shard order."""
    pa, pq = _arrow()
    files = sorted(Path(folder, "data").glob("*.parquet"))
    rows: list[dict[str, Any]] = []
    for path in files:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as error:  # a truncated file is ArrowInvalid, a missing footer OSError
            raise ValueError(
                f"The dataset shard {path} cannot be read ({error}): it is truncated or not a parquet file. Restore "
                f"it (`git checkout -- {path}` for a shard the repository ships) or delete it and export its rows "
                "again (`dlite-hf dataset export`)."
            ) from None
        rows.extend(table.to_pylist())
    return rows


def export_rows(
    rows_path: str | Path, prompts_path: str | Path, folder: str | Path, split: str = "greedy"
) -> dict[str, Any]:
    """Append the rows of `rows_path` not yet in the dataset at `folder` as new shards of `split`, each with its
    prompt's source from `prompts_path`; returns counts and the shards written."""
    pa, pq = _arrow()
    folder = Path(folder)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    present = {row["id"] for row in read_shards(folder)}
    prompts = {p["id"]: p for p in read_jsonl(prompts_path)}
    new = []
    for row in read_jsonl(rows_path):
        if row["id"] in present:
            continue
        prompt = prompts.get(row["id"].split("#", 1)[0])  # sampled rows are "<prompt id>#<sample>"
        if prompt is None:
            raise ValueError(
                f"{rows_path}: row {row['id']!r} has no prompt in {prompts_path}; export the rows with the prompt "
                "file they were generated from."
            )
        n = int(row["prompt_tokens"])
        new.append(
            {
                "id": row["id"],
                "prompt_id": prompt["id"],
                "domain": row.get("workload") or prompt.get("workload"),
                "source": prompt.get("source", ""),
                "prompt_sha256": prompt_sha256(row["input_ids"][:n]),
                "prompt_tokens": n,
                "response_ids": [int(t) for t in row["input_ids"][n:]],
                "finished": bool(row.get("finished", False)),
                "sampling": row.get("sampling", "greedy"),
                "engine": row.get("engine", "transformers"),
            }
        )
    existing = sorted((folder / "data").glob(f"{split}-*.parquet"))
    number = int(existing[-1].stem.rsplit("-", 1)[1]) + 1 if existing else 0
    written = []
    types = {"prompt_tokens": pa.int32(), "response_ids": pa.list_(pa.int32()), "finished": pa.bool_()}
    schema = pa.schema([(name, types.get(name, pa.string())) for name in COLUMNS])
    for start in range(0, len(new), SHARD_ROWS):
        chunk = new[start : start + SHARD_ROWS]
        path = folder / "data" / f"{split}-{number:05d}.parquet"
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(pa.Table.from_pylist(chunk, schema=schema), tmp, compression="zstd")
        if tmp.stat().st_size > MAX_SHARD_BYTES:
            tmp.unlink()
            raise RuntimeError(f"A shard of {len(chunk)} rows is over 40 MB; lower SHARD_ROWS.")
        tmp.rename(path)  # a kill never leaves a half-written shard under a shard's name
        written.append(path.name)
        number += 1
    return {"exported": len(new), "already_there": len(present), "shards": written}


def _kind(row: dict[str, Any]) -> str:
    return "greedy" if row["sampling"] == "greedy" else "sampled"


def dataset_stats(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Responses and response tokens per (sampling kind, domain), as the dataset card's table shows them."""
    table: dict[str, Counter] = {}
    for row in sorted(rows, key=lambda r: (_kind(r), r["domain"])):
        table.setdefault(_kind(row), Counter())[row["domain"]] += 1
        table.setdefault(f"{_kind(row)}_tokens", Counter())[row["domain"]] += len(row["response_ids"])
    return table


def rebuild_rows(
    folder: str | Path, prompts_path: str | Path, tokenizer: Any, out_path: str | Path | None = None
) -> dict[str, Any]:
    """The dataset's training rows, written to `out_path` when given: each row's prompt from `prompts_path`, templated
    and checked against its `prompt_sha256`, then its response; a missing prompt (an on-disk source) is counted."""
    prompts = {p["id"]: p for p in read_jsonl(prompts_path)}
    cache: dict[str, list[int]] = {}
    missing, mismatched, written = [], [], 0
    with open(out_path, "w", encoding="utf-8") if out_path is not None else contextlib.nullcontext() as out:
        for row in read_shards(folder):
            prompt = prompts.get(row["prompt_id"])
            if prompt is None:
                missing.append(row["prompt_id"])
                continue
            ids = cache.get(row["prompt_id"])
            if ids is None:
                ids = cache[row["prompt_id"]] = chat_prompt_ids(tokenizer, prompt["messages"])
            if prompt_sha256(ids) != row["prompt_sha256"]:
                mismatched.append(row["prompt_id"])
                continue
            record = response_row(row["id"], row["domain"], ids, list(row["response_ids"]), finished=row["finished"])
            if out is not None:
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
            written += 1
    if mismatched:
        raise ValueError(
            f"{len(mismatched)} rows have a rebuilt prompt whose token ids differ from the stored hash (e.g. "
            f"{mismatched[:3]}). Rebuild the prompts with the dataset card's `dlite-hf mix build` command and the "
            "package versions it names, and the target's own tokenizer."
        )
    return {"rows": written, "prompts": len(cache), "missing_prompts": len(set(missing))}


def card_table(rows: list[dict[str, Any]]) -> str:
    """The card's table: responses and tokens per domain, greedy and sampled apart, and the share ended with EOS."""
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault((row["domain"], _kind(row)), []).append(row)
    lines = [
        "| domain | source | greedy responses | greedy tokens | sampled responses | sampled tokens | ended with EOS |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    domains = sorted({domain for domain, _ in by})
    totals = Counter()
    for domain in domains:
        greedy, sampled = by.get((domain, "greedy"), []), by.get((domain, "sampled"), [])
        both = greedy + sampled
        packages = sorted({r["source"].split(":", 1)[0] for r in both if r["source"]})
        g_tok, s_tok = (sum(len(r["response_ids"]) for r in part) for part in (greedy, sampled))
        finished = sum(r["finished"] for r in both)
        totals.update(g=len(greedy), gt=g_tok, s=len(sampled), st=s_tok, f=finished, n=len(both))
        lines.append(
            f"| {domain} | {', '.join(packages)} | {len(greedy):,} | {g_tok:,} | {len(sampled):,} | {s_tok:,} | "
            f"{finished / len(both):.0%} |"
        )
    if domains:
        lines.append(
            f"| **all ({len(domains)} domains)** | | **{totals['g']:,}** | **{totals['gt']:,}** | "
            f"**{totals['s']:,}** | **{totals['st']:,}** | {totals['f'] / totals['n']:.0%} |"
        )
    return "\n".join(lines)


def sources_table(rows: list[dict[str, Any]]) -> str:
    """The packages the dataset's prompts come from, with their licenses."""
    licenses: dict[str, set[str]] = {}
    for source in SOURCES.values():
        if "==" in source.package and not source.package.startswith("dlite-hf"):
            licenses.setdefault(source.package, set()).add(source.license)
    on_disk = {"man": SOURCES["manpages"], "python": SOURCES["stdlib_modules"], "dlite_hf": SOURCES["puzzles"]}
    lines = ["| source | license |", "|---|---|"]
    for package in sorted({r["source"].split(":", 1)[0] for r in rows if r["source"]}):
        known = licenses.get(package)
        if known is None:  # an on-disk source (the machine's manual pages, the standard library) or our generator
            local = next((s for prefix, s in on_disk.items() if package.startswith(prefix)), None)
            known = {local.license} if local is not None else {"see dlite_hf.data.sources"}
        lines.append(f"| {package} | {'; '.join(sorted(known))} |")
    return "\n".join(lines)


TABLE_MARKS = ("<!-- dataset table: dlite-hf dataset card -->", "<!-- /dataset table -->")


def render_into(document: str, rows: list[dict[str, Any]], with_sources: bool = False) -> str:
    """`document` with the region between :data:`TABLE_MARKS` replaced by the tables rendered from `rows`."""
    start, end = TABLE_MARKS
    if start not in document or end not in document:
        raise ValueError(f"The document has no {start} ... {end} region to render the dataset table into.")
    head, rest = document.split(start, 1)
    _, tail = rest.split(end, 1)
    body = card_table(rows) + ("\n\n" + sources_table(rows) if with_sources else "")
    return f"{head}{start}\n{body}\n{end}{tail}"
