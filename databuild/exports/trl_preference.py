"""trl-dpo and trl-kto: preference rows in TRL's tokenized columns (exports/preference.py), and beside
them the DPOConfig / KTOConfig arguments and a train script (exports/trl_script.py) that reads them.

TRL (huggingface/trl@f2cd5771, released as trl 1.9.0, whose trainer files are the same) has no input
for tokenized preference rows: DPOTrainer.__init__ runs _prepare_dataset on every text dataset
(trl/trainer/dpo_trainer.py L842-852), which extracts a prompt from `chosen`/`rejected` text, appends
EOS to text completions and tokenizes again (L980-1081); KTOTrainer likewise (kto_trainer.py
L1006-1139). Its collators read `prompt_ids` and `chosen_ids`/`rejected_ids` (`completion_ids`, `label`)
(dpo_trainer.py L152-210, kto_trainer.py L165-210) and train every completion token. The script's
trainer hands the rows over as they are (its `_prepare_dataset`) and sets the collator's
completion_mask from the rows' target masks (TRL's public `data_collator` argument), with
`max_length: null` (TRL's truncation, keep_start at 1024 by default, would cut targets off silently;
the build's own length limits apply instead) and `remove_unused_columns: false` (the masks reach the
collator).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .preference import DPO_SCHEMA, KTO_SCHEMA, ID, LABEL, PROMPT, SIDES, dpo_table, kto_table
from .recipe_text import absolute, yaml_text
from .stream import Format, export_stem
from .trl_script import script

TRL = "huggingface/trl@f2cd5771"
TRL_VERSION = "1.9.0"


class PreferenceFormat(Format):
    """A preference export: the blocks are (first row, table, file name) of the native preference file."""
    kind: str  # "DPO" or "KTO"
    columns: tuple[str, ...]  # the columns the script's trainer reads
    native: tuple[str, ...]  # the native columns it reads
    padding_why = "none: a preference row file holds one pair (or one labelled completion) per row, unpadded"
    tail_why = ("untrained tokens after a completion's last target (what the template writes after the end of "
                "turn), left out: no trained log-probability depends on them")

    def __init__(self) -> None:
        super().__init__()
        self.tail_dropped = 0

    def blocks(self, source: Path) -> Iterator[tuple[int, pa.Table, str]]:
        """The file is verified, and of this format's kind (export checks both), before this is called."""
        parquet, first = pq.ParquetFile(source), 0
        for group in range(parquet.metadata.num_row_groups):
            table = parquet.read_row_group(group, columns=list(self.native))
            yield first, table, Path(source).name
            first += table.num_rows

    def convert(self, block: tuple[int, pa.Table, str]) -> pa.Table:
        first_row, table, source = block
        out, tail = self.cut(table, first_row, source)
        self.tail_dropped += tail
        return out

    def more_counts(self) -> dict[str, int]:
        return {"untrained_tail_tokens_dropped": self.tail_dropped}

    def trainer_config(self, out: Path, row_tokens: int, rows: int, validation: Path | None = None) -> dict[str, str]:
        stem, kind = export_stem(out), self.kind
        arguments = {"max_length": None, "remove_unused_columns": False,
                     **({"eval_strategy": "epoch"} if validation else {})}
        header = [f"TRL ({TRL}, trl=={TRL_VERSION}) {kind}Config arguments that read {absolute(out)} ({rows} rows of at",
                  f"most {row_tokens} tokens), written by `databuild export --to {self.name}`: {kind}Config(**these,",
                  f"output_dir=...), with the trainer of {stem}.{kind.lower()}.py (TRL's own would tokenize the rows again",
                  "and train every completion token)."]
        text = script(kind, self.name, TRL, TRL_VERSION, absolute(out), arguments, self.columns, stem,
                      None if validation is None else absolute(validation))
        return {f"{stem}.{kind.lower()}.yaml": yaml_text(header, arguments), f"{stem}.{kind.lower()}.py": text}


class DpoFormat(PreferenceFormat):
    name, kind, schema, reads = "trl-dpo", "DPO", DPO_SCHEMA, ("paired",)
    columns = ("prompt_ids", "chosen_ids", "rejected_ids", "chosen_target_mask", "rejected_target_mask")
    native = (ID, PROMPT, *SIDES["chosen"], *SIDES["rejected"])
    convention = ("TRL DPOTrainer, tokenized: prompt_ids (shared by the pair), chosen_ids and rejected_ids up to their "
                  "last target, chosen_target_mask and rejected_target_mask (1 = target) for the script's collator; "
                  "a common untrained head joins the prompt, an untrained tail is left out")
    cut = staticmethod(dpo_table)


class KtoFormat(PreferenceFormat):
    name, kind, schema, reads = "trl-kto", "KTO", KTO_SCHEMA, ("unpaired",)
    columns = ("prompt_ids", "completion_ids", "label", "completion_target_mask")
    native = (ID, PROMPT, *SIDES["completion"], LABEL)
    convention = ("TRL KTOTrainer, tokenized: prompt_ids, completion_ids up to its last target, label, "
                  "completion_target_mask (1 = target) for the script's collator; its untrained head joins the "
                  "prompt, its untrained tail is left out")
    cut = staticmethod(kto_table)
