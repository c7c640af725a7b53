"""A recipe's `workload.dataset` block: read it, and write a build's results into it.

The write adds the values the block lacks and refuses to change one it already pins, unless asked to
(`repin`): a rebuild that does not reproduce the pinned rows must not pass silently. Everything else
in the file stays byte for byte (comments, key order, quoting, folded strings, line breaks):
`yaml_splice` edits the text only where ruamel says each value stands. The result must parse to
the same document with just those values changed before it atomically replaces the file.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ..errors import BuildError
from ..publish.lock import exclusive
from ..publish.manifest_read import read_manifest
from ..publish.yaml_splice import splices
from ..utils.files import replace_durably


def _read(path: Path) -> str:
    """The recipe's text as stored: line breaks untranslated, so offsets and CRLF survive the edit."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise BuildError(f"{path}: cannot read recipe: {exc}") from None
    except UnicodeDecodeError as exc:
        raise BuildError(f"{path}: not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x}); "
                         "a recipe is read as UTF-8") from None


def _load(text: str, where: str, typ: str = "rt"):
    try:
        return YAML(typ=typ, pure=True).load(text)
    except YAMLError as exc:
        raise BuildError(f"{where}: not valid YAML: {exc}") from None


def _dataset(document, where: str):
    workload = document.get("workload") if isinstance(document, dict) else None
    dataset = workload.get("dataset") if isinstance(workload, dict) else None
    if not isinstance(dataset, dict):
        raise BuildError(f"{where}: no workload.dataset block; add one ('workload:' then '  dataset: {{}}') for make "
                         "--recipe to fill")
    return dataset


def read_dataset_block(path: Path) -> dict[str, Any]:
    return _dataset(_load(_read(path), str(path)), str(path))


def recipe_values(manifest: dict[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
    """(key path under workload.dataset, value) for everything a build records there."""
    output, build, tokenizer = manifest["output"], manifest["build"], manifest["inputs"]["tokenizer"]
    kwargs = ", ".join(f"{key} {value}" for key, value in build["template_kwargs"].items())
    values = [
        (("rows_sha256",), output["rows_sha256"]),
        (("build", "name"), manifest["name"]),
        (("build", "tokenizer"), tokenizer_text(tokenizer)),
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
    # not `packing`: published recipes hold a prose description of the packing under that key
    values.append((("build", "packing_policy"), packing_text(build.get("packing") or {"policy": "concat"})))
    if manifest.get("validation"):
        split, held = manifest["validation"], build["validation"]
        rule = (f"count {held['count']}" if held.get("count") is not None else f"share {held['share']}") + \
            f" of each source, seed {held['seed']}"
        values += [(("validation", "file"), split["file"]), (("validation", "split"), rule),
                   (("validation", "rows"), split["rows"]), (("validation", "rows_sha256"), split["rows_sha256"]),
                   (("validation", "parquet_sha256"), split["parquet_sha256"])]
    return values


def tokenizer_text(tokenizer: dict[str, Any]) -> str:
    """The manifest's inputs.tokenizer as the recipe shows it: the repo's last part, its revision, the pins."""
    pins = "; ".join(f"{name} sha256 {tokenizer['sha256'][name]}" for name in ("tokenizer.json", "chat_template.jinja")
                     if name in tokenizer["sha256"])
    return f"{tokenizer['repo'].split('/')[-1]} (revision {tokenizer['revision']}; {pins})"


def packing_text(packing: dict[str, Any]) -> str:
    """The manifest's build.packing as the recipe shows it: `concat`, or e.g.
    `bfd (window 1000, overlong drop, pad <|endoftext|> id 199999 from tokenizer)`."""
    if packing["policy"] == "concat":
        return "concat"
    pad = packing["pad"]
    return (f"{packing['policy']} (window {packing['window']}, overlong {packing['overlong']}, "
            f"pad {pad['token']} id {pad['id']} from {pad['from']})")


def _same(current: Any, value: Any) -> bool:
    """Equal as YAML values; a ratio compares at the two decimals a recipe shows."""
    if isinstance(current, bool):
        return False
    if isinstance(value, float):
        return isinstance(current, (int, float)) and round(float(current), 2) == value
    return isinstance(current, type(value)) and current == value


def _differences(dataset: dict, values: list[tuple[tuple[str, ...], Any]], where: str):
    """(values to write, pinned values that differ as (path, recipe's, build's)); a null counts as absent."""
    writes, differing = [], []
    for path, value in values:
        mapping = dataset
        for depth, key in enumerate(path[:-1]):
            mapping = mapping.get(key) or {}  # a key with nothing after it is a mapping still to fill
            if not isinstance(mapping, dict):
                raise BuildError(f"{where}: workload.dataset.{'.'.join(path[:depth + 1])} is not a mapping; "
                                 "recipe left unchanged")
        current = mapping.get(path[-1])
        if current is not None and _same(current, value):
            continue
        if current is not None:
            differing.append((path, current, value))
        writes.append((path, value))
    return writes, differing


def updated_text(text: str, values: list[tuple[tuple[str, ...], Any]], where: str, repin: bool = False) -> str:
    """The recipe's text with the values written in; a differing pinned value is refused unless repin."""
    expected = _load(text, where, "safe")
    writes, differing = _differences(_dataset(expected, where), values, where)
    if differing and not repin:
        path, current, value = differing[0]
        count = len(differing)
        raise BuildError(f"{where}: workload.dataset.{'.'.join(path)} is {current!r} in the recipe but {value!r} in "
                         f"this build ({count} differing key{'s' * (count > 1)} in all); recipe left unchanged, "
                         "pass --repin to overwrite them with this build's")
    if not writes:
        return text
    new = text
    # From the end, so that earlier offsets hold; at one offset the deeper-indented text must come first (a
    # mapping's last value, then its new keys, then its parent's), so it goes in last.
    for start, stop, rendered, _ in sorted(splices(text, writes, where), key=lambda s: (s[0], -s[3]), reverse=True):
        new = new[:start] + rendered + new[stop:]
    for path, value in writes:
        mapping = _dataset(expected, where)
        for key in path[:-1]:
            if mapping.get(key) is None:
                mapping[key] = {}
            mapping = mapping[key]
        mapping[path[-1]] = value
    try:
        written = YAML(typ="safe", pure=True).load(new)
    except YAMLError:
        written = None
    if written != expected:  # the whole document, so nothing else may have moved
        raise BuildError(f"{where}: the edit did not read back as written: workload.dataset is not a layout the "
                         "writer can edit in place; recipe left unchanged")
    return new


def update_recipe(recipe: Path, manifest_file: Path, repin: bool = False,
                  values: list[tuple[tuple[str, ...], Any]] | None = None) -> bool:
    """Write a verified build's results into the recipe (`values`, default the SFT manifest's recipe_values);
    True if the file changed.

    A symlinked recipe is written through to its target, so the link stays a link. Read, edit and
    replace happen under the recipe's lock: a concurrent write-back reads the file this one wrote.
    """
    values = recipe_values(read_manifest(manifest_file)) if values is None else values
    target = recipe.resolve()
    with exclusive(target, f"a write-back into {recipe}"):
        text = _read(recipe)
        new = updated_text(text, values, str(recipe), repin)
        if new == text:
            return False
        partial = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
        try:
            with open(partial, "w", encoding="utf-8", newline="") as handle:
                handle.write(new)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(partial, target.stat().st_mode & 0o7777)
            replace_durably(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    return True
