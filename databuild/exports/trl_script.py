"""The train script written beside a trl-dpo or trl-kto export: TRL's trainer, with the two changes the
tokenized rows need (trl_preference.py says why), and nothing else of TRL's replaced.

- `_prepare_dataset` returns the rows as they are (for KTO, with the KL term's mismatched completions
  and their target masks, built as TRL's own step builds them: kto_trainer.py L1096-1112);
- the collator is TRL's (DataCollatorForPreference, DataCollatorForUnpairedPreference), after which
  `completion_mask` is set from the rows' `*_target_mask` on each completion's tokens, so that a tool
  result or a user turn inside a completion is not summed. The masks reach it with
  `remove_unused_columns=False`, and line up with the tokens only without truncation (`max_length=None`):
  the trainer refuses either setting otherwise.
"""

from __future__ import annotations

KL_ROTATION = '''
    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        check_columns(dataset, dataset_name)
        if not self.calculate_KL:
            return dataset
        # The KL term's mismatched pairs: each prompt with the completion before it in its batch of
        # per_device_train_batch_size rows, the first with the last (kto_trainer.py L1096-1112 builds them so).
        def rotate(batch):
            return {f"KL_{name}": batch[name][-1:] + batch[name][:-1] for name in ("completion_ids", "completion_target_mask")}
        return dataset.map(rotate, batched=True, batch_size=args.per_device_train_batch_size)
'''

AS_THEY_ARE = '''
    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        check_columns(dataset, dataset_name)
        return dataset
'''

# kind -> (TRL's collator and its module, (batch key, half of the batch, the rows' mask column) per mask, prepare)
KINDS = {
    "DPO": ("DataCollatorForPreference", "dpo_trainer",
            (("completion_mask", 0, "chosen_target_mask"), ("completion_mask", 1, "rejected_target_mask")), AS_THEY_ARE),
    "KTO": ("DataCollatorForUnpairedPreference", "kto_trainer",
            (("completion_mask", 0, "completion_target_mask"), ("KL_completion_mask", 0, "KL_completion_target_mask")),
            KL_ROTATION),
}


def script(kind: str, export: str, trl: str, version: str, rows: str, arguments: dict, columns: tuple[str, ...],
           stem: str, validation: str | None) -> str:
    collator, module, masks, prepare = KINDS[kind]
    evaluation = "" if validation is None else f"\nEVAL_ROWS = {validation!r}"
    eval_dataset = "" if validation is None else (
        '\n                          eval_dataset=load_dataset("parquet", data_files=EVAL_ROWS, split="train"),')
    return f'''"""Train a causal LM on {rows} with TRL's {kind}Trainer ({trl}, trl=={version}).
Written by `databuild export --to {export}`. The model's tokenizer must be the one the rows were built with.

    python {stem}.{kind.lower()}.py MODEL OUTPUT_DIR [--{kind}CONFIG_ARGUMENT VALUE ...]   # e.g. --beta 0.1
"""

import sys

import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, HfArgumentParser
from transformers.utils import is_torch_bf16_gpu_available
from trl import {kind}Config, {kind}Trainer
from trl.trainer.{module} import {collator}

ROWS = {rows!r}
ARGUMENTS = {arguments!r}{evaluation}
COLUMNS = {columns!r}
MASKS = {masks!r}  # (the collator's mask, which half of the batch, the rows' target mask)


def check_columns(dataset, name):
    missing = set(COLUMNS) - set(dataset.column_names or COLUMNS)
    if missing:
        raise ValueError(f"the {{name}} rows lack {{sorted(missing)}}: not a databuild {export} export")


class TargetsOnly({collator}):
    """TRL's collator, then completion_mask 0 on each completion's untrained tokens (the rows' target masks:
    a tool result or a user turn inside a completion), which TRL's own marks 1 like every completion token."""

    def torch_call(self, examples):
        batch = super().torch_call(examples)
        for key, half, column in MASKS:
            if key in batch:
                for row, example in enumerate(examples):
                    start, mask = len(example["prompt_ids"]), example[column]
                    batch[key][half * len(examples) + row, start:start + len(mask)] = torch.tensor(mask)
        return batch


class Tokenized{kind}Trainer({kind}Trainer):
    """{kind}Trainer on rows tokenized already: its _prepare_dataset would extract a prompt from text columns
    the rows do not have and tokenize again; its collator would train every completion token."""

    def __init__(self, model, args, processing_class, data_collator=None, **kwargs):
        if args.max_length is not None or args.remove_unused_columns:
            raise ValueError("max_length must be None and remove_unused_columns False: the rows' target masks "
                             "reach the collator only with both")
        if data_collator is None:
            pad = processing_class.pad_token_id
            data_collator = TargetsOnly(pad_token_id=processing_class.eos_token_id if pad is None else pad,
                                        pad_to_multiple_of=args.pad_to_multiple_of)
        super().__init__(model=model, args=args, processing_class=processing_class, data_collator=data_collator,
                         **kwargs)
{prepare}

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
