"""trl-dpo and trl-kto: preference rows in TRL's tokenized columns (export/preference.py), and beside
them the DPOConfig / KTOConfig arguments and a train script that reads them as they are.

TRL (huggingface/trl@f2cd5771, released as trl 1.9.0, whose trainer files are the same) has no input
for tokenized preference rows: DPOTrainer.__init__ runs _prepare_dataset on every text dataset
(trl/trainer/dpo_trainer.py L842-852), which extracts a prompt from `chosen`/`rejected` text, appends
EOS to text completions and tokenizes again (L980-1081); KTOTrainer likewise (kto_trainer.py
L1006-1139). Its collators read `prompt_ids` and `chosen_ids`/`rejected_ids` (`completion_ids`, `label`)
(dpo_trainer.py L152-210, kto_trainer.py L165-210), which is what the rows hold; the script's trainer
hands them over as they are by overriding `_prepare_dataset`, the one step that would re-tokenize
(for KTO it also writes the KL term's mismatched completions, as that step does).
`max_length: null`: the collator's truncation (keep_start, 1024 by default) would cut targets off
silently; the build's own length limits apply instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BuildError
from .preference import DPO_SCHEMA, KTO_SCHEMA, ID, LABEL, PROMPT, SIDES, dpo_table, kto_table
from .recipe_text import absolute, yaml_text
from .stream import Format, export_stem

TRL = "huggingface/trl@f2cd5771"
TRL_VERSION = "1.9.0"


class PreferenceFormat(Format):
    """A preference export: the blocks are (first row, table, file name) of the native preference file."""
    kind: str  # "DPO" or "KTO"
    columns: tuple[str, ...]  # the collator's columns, for the script's check
    native: tuple[str, ...]  # the native columns it reads
    padding_why = "none: a preference row file holds one pair (or one labelled completion) per row, unpadded"
    tail_why = ("untrained tokens after a completion's last target (what the template writes after the end of "
                "turn), left out: no trained log-probability depends on them")

    def __init__(self) -> None:
        super().__init__()
        self.tail_dropped = 0

    def blocks(self, source: Path) -> Iterator[tuple[int, pa.Table, str]]:
        parquet, first = pq.ParquetFile(source), 0
        missing = [name for name in self.native if name not in parquet.schema_arrow.names]
        if missing:
            raise BuildError(f"{source}: refused: --to {self.name} reads a preference row file with "
                             f"{', '.join(self.native)}, and this file has no {missing[0]} (a packed SFT row file "
                             "exports --to hf)")
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
        arguments = {"max_length": None, **({"eval_strategy": "epoch"} if validation else {})}
        header = [f"TRL ({TRL}, trl=={TRL_VERSION}) {kind}Config arguments that read {absolute(out)} ({rows} rows),",
                  f"written by `databuild export --to {self.name}`: {kind}Config(**these, output_dir=...), with the",
                  f"trainer of {stem}.{kind.lower()}.py (its _prepare_dataset would tokenize the rows again)."]
        evaluation = "" if validation is None else f"\nEVAL_ROWS = {absolute(validation)!r}"
        eval_dataset = "" if validation is None else (
            '\n                          eval_dataset=load_dataset("parquet", data_files=EVAL_ROWS, split="train"),')
        script = f'''"""Train a causal LM on {absolute(out)} with TRL's {kind}Trainer ({TRL}, trl=={TRL_VERSION}).
Written by `databuild export --to {self.name}`. The model's tokenizer must be the one the rows were built with.

    python {stem}.{kind.lower()}.py MODEL OUTPUT_DIR [--{kind}CONFIG_ARGUMENT VALUE ...]   # e.g. --beta 0.1
"""

import sys

from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser
from transformers.utils import is_torch_bf16_gpu_available
from trl import {kind}Config, {kind}Trainer

ROWS = {absolute(out)!r}
ARGUMENTS = {arguments!r}{evaluation}
COLUMNS = {self.columns!r}


class Tokenized{kind}Trainer({kind}Trainer):
    """{kind}Trainer on rows tokenized already: its _prepare_dataset would extract a prompt from text columns
    the rows do not have and tokenize again; its collator reads the rows' columns as they are."""

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        missing = set(COLUMNS) - set(dataset.column_names or COLUMNS)
        if missing:
            raise ValueError(f"the {{dataset_name}} rows lack {{sorted(missing)}}: not a databuild {self.name} export")
{self.prepared}

def main():
    model_name, output_dir = sys.argv[1], sys.argv[2]
    # TRL's default is bf16=True, which stops at start-up on a machine without bf16 (a CPU, an older GPU).
    bf16 = is_torch_bf16_gpu_available()
    print(f"bf16 {{bf16}}", flush=True)
    parser = HfArgumentParser({kind}Config)  # {kind}Config's own arguments after OUTPUT_DIR replace these defaults
    parser.set_defaults(**ARGUMENTS, bf16=bf16)
    (config,) = parser.parse_args_into_dataclasses(["--output_dir", output_dir, *sys.argv[3:]])
    trainer = Tokenized{kind}Trainer(model=AutoModelForCausalLM.from_pretrained(model_name), args=config,
                          train_dataset=load_dataset("parquet", data_files=ROWS, split="train"),{eval_dataset}
                          processing_class=AutoTokenizer.from_pretrained(model_name))
    trainer.train()


if __name__ == "__main__":
    main()
'''
        return {f"{stem}.{kind.lower()}.yaml": yaml_text(header, arguments), f"{stem}.{kind.lower()}.py": script}


class DpoFormat(PreferenceFormat):
    name, kind, schema = "trl-dpo", "DPO", DPO_SCHEMA
    columns = ("prompt_ids", "chosen_ids", "rejected_ids")
    native = (ID, PROMPT, *SIDES["chosen"], *SIDES["rejected"])
    prepared = "        return dataset\n"
    convention = ("TRL DPOTrainer, tokenized: prompt_ids (shared by the pair), chosen_ids and rejected_ids, every "
                  "token of which is a target; a completion's untrained head joins the prompt, its untrained tail is left out")
    cut = staticmethod(dpo_table)


class KtoFormat(PreferenceFormat):
    name, kind, schema = "trl-kto", "KTO", KTO_SCHEMA
    columns = ("prompt_ids", "completion_ids", "label")
    native = (ID, PROMPT, *SIDES["completion"], LABEL)
    prepared = """\
        if not self.calculate_KL:
            return dataset
        # The KL term's mismatched pairs: each prompt with the completion before it in its batch of
        # per_device_train_batch_size rows, the first with the last (kto_trainer.py L1096-1112 builds them so).
        def rotate(batch):
            return {"KL_completion_ids": batch["completion_ids"][-1:] + batch["completion_ids"][:-1]}
        return dataset.map(rotate, batched=True, batch_size=args.per_device_train_batch_size)
"""
    convention = ("TRL KTOTrainer, tokenized: prompt_ids, completion_ids (every token a target), label; a "
                  "completion's untrained head joins the prompt, its untrained tail is left out")
    cut = staticmethod(kto_table)
