"""The article's references (workflow/report/references.yaml), numbered in the file's order and cited in the text
as [@key] or [@a, @b]."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REFERENCES = "workflow/report/references.yaml"
_CITATION = re.compile(r"\[(@[\w-]+(?:,\s*@[\w-]+)*)\]")


def load_references(path: str | Path) -> list[dict]:
    entries = yaml.safe_load(Path(path).read_text())
    keys = [entry["key"] for entry in entries]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{path}: a reference key is listed twice")
    return [{"key": entry["key"], "text": " ".join(str(entry["text"]).split())} for entry in entries]


def cited_keys(text: str) -> list[str]:
    return [key.strip().lstrip("@") for group in _CITATION.findall(text) for key in group.split(",")]


def resolve_citations(text: str, numbers: dict[str, int]) -> str:
    """[@a] -> [1], [@a, @b] -> [1, 2]; an unknown key is an error naming it."""
    def number(match: re.Match) -> str:
        keys = [key.strip().lstrip("@") for key in match.group(1).split(",")]
        unknown = [key for key in keys if key not in numbers]
        if unknown:
            raise ValueError(f"citation of {unknown} not in {REFERENCES}")
        return "[" + ", ".join(str(numbers[key]) for key in keys) + "]"
    return _CITATION.sub(number, text)


def numbered(refs: list[dict], texts: list[str]) -> dict[str, int]:
    """Each reference's number, in the order of the references file; a reference no text cites is an error."""
    numbers = {ref["key"]: k + 1 for k, ref in enumerate(refs)}
    cited = {key for text in texts for key in cited_keys(text)}
    uncited = [ref["key"] for ref in refs if ref["key"] not in cited]
    if uncited:
        raise ValueError(f"{REFERENCES}: {uncited} listed but never cited")
    return numbers
