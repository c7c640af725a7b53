"""A recipe's `workload.dataset` block: read it, and write a build's results into it.

The write changes only the values that differ, in place, and leaves every other byte of the file as
it was (comments, key order, quoting, folded long strings). ruamel.yaml parses the recipe and says
where each value stands; the edit splices just those lines, re-checks the result by parsing it
again, and replaces the file atomically.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import BuildError
from .manifest import read_manifest

WIDTH = 120  # the seed recipe folds long strings at 120 columns


def _load(text: str, where: str):
    try:
        return YAML().load(text)
    except YAMLError as exc:
        raise BuildError(f"{where}: not valid YAML: {exc}".replace("\n", " ")) from None


def _dataset(document, where: str):
    dataset = ((document or {}).get("workload") or {}).get("dataset")
    if not isinstance(dataset, dict):
        raise BuildError(f"{where}: no workload.dataset block")
    return dataset


def read_dataset_block(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"{path}: cannot read recipe: {exc}") from None
    return _dataset(_load(text, str(path)), str(path))


def recipe_values(manifest: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
    """(key path under workload.dataset, value) for everything a build records there."""
    output, build, tokenizer = manifest["output"], manifest["build"], manifest["inputs"]["tokenizer"]
    pins = "; ".join(f"{name} sha256 {tokenizer['sha256'][name]}" for name in ("tokenizer.json", "chat_template.jinja")
                     if name in tokenizer["sha256"])
    kwargs = ", ".join(f"{key} {value}" for key, value in build["template_kwargs"].items())
    values = [
        (("rows_sha256",), output["rows_sha256"]),
        (("build", "name"), manifest["name"]),
        (("build", "tokenizer"), f"{tokenizer['repo'].split('/')[-1]} (revision {tokenizer['revision']}; {pins})"),
        (("build", "loss_mask"), build["loss_mask"]),
        (("build", "rows"), output["rows"]),
        (("build", "row_tokens"), output["row_tokens"]),
        (("build", "padding_tokens"), output["padding_tokens"]),
        (("build", "seed"), build["seed"]),
        (("build", "supervised_token_ratio"), round(output["supervised_token_ratio"], 2)),
        (("build", "parquet_sha256"), output["parquet_sha256"]),
        (("build", "parquet_bytes"), output["parquet_bytes"]),
    ]
    if kwargs:
        values.append((("build", "template_kwargs"), kwargs))
    return values


def _scalar_lines(key: str, value: Any, column: int) -> list[str]:
    """`key: value` as YAML at the given indent, folded like the seed, as whole lines."""
    if isinstance(value, float):
        return [" " * column + f"{key}: {value:.2f}\n"]
    yaml = YAML()
    yaml.width = max(WIDTH - column, 40)
    buffer = io.StringIO()
    yaml.dump({key: value}, buffer)
    # A plain scalar's line breaks fold to spaces: the spaces ruamel leaves before them are noise.
    lines = [line.rstrip(" \n") + "\n" for line in buffer.getvalue().splitlines()]
    return [" " * column + lines[0]] + [" " * (column + 2) + line.lstrip(" ") for line in lines[1:]]


def _value_end(lines: list[str], key_line: int, key_column: int) -> int:
    """Index after the last line of the value that starts on key_line (continuations are deeper)."""
    end = key_line + 1
    while end < len(lines):
        stripped = lines[end].strip()
        indent = len(lines[end]) - len(lines[end].lstrip(" "))
        if stripped and indent <= key_column:
            break
        end += 1
    while end > key_line + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _same(current: Any, value: Any) -> bool:
    """Equal as YAML values: ruamel hands back its own int/float/str subclasses."""
    if isinstance(value, float):
        return isinstance(current, (int, float)) and round(float(current), 2) == value
    if isinstance(value, int):
        return isinstance(current, int) and not isinstance(current, bool) and int(current) == value
    return isinstance(current, str) and str(current) == value


def updated_text(text: str, values: list[tuple[tuple[str, ...], Any]], where: str) -> str:
    """The recipe's text with the values written in; each pass edits one key, then re-parses."""
    for path, value in values:
        document = _load(text, where)
        mapping = _dataset(document, where)
        for key in path[:-1]:
            if not isinstance(mapping.get(key), dict):
                raise BuildError(f"{where}: workload.dataset has no '{key}' mapping to write into")
            mapping = mapping[key]
        key = path[-1]
        if key in mapping and _same(mapping[key], value):
            continue
        lines = text.splitlines(keepends=True)
        if key in mapping:
            line, column = mapping.lc.key(key)
            lines[line:_value_end(lines, line, column)] = _scalar_lines(key, value, column)
        else:
            last = list(mapping)[-1]
            line, column = mapping.lc.key(last)
            end = _value_end(lines, line, column)
            lines[end:end] = _scalar_lines(key, value, column)
        text = "".join(lines)
    return text


def update_recipe(recipe: Path, manifest_file: Path) -> bool:
    """Write a verified build's results into the recipe; True if the file changed."""
    manifest = read_manifest(manifest_file)
    try:
        text = recipe.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"{recipe}: cannot read recipe: {exc}") from None
    values = recipe_values(manifest)
    new = updated_text(text, values, str(recipe))
    if new == text:
        return False
    written = _dataset(_load(new, str(recipe)), str(recipe))
    for path, value in values:  # the edit must read back as exactly what was meant
        current = written
        for key in path:
            current = current[key]
        if not _same(current, value):
            raise BuildError(f"{recipe}: writing workload.dataset.{'.'.join(path)} did not read back; left unchanged")
    partial = recipe.with_name(f".{recipe.name}.partial")
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(new)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(partial, recipe.stat().st_mode & 0o7777)
    os.replace(partial, recipe)
    return True
