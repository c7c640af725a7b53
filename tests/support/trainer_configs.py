"""The trainers' own configuration checks, transcribed in our words (no trainer is installed here),
beside their reading code (tests/support/trainer_readers.py): what each does with the configuration an
export writes, before it reads a row. Each function cites the file and lines it transcribes, at the
commits below; a new trainer commit is a one-line change here plus whatever its diff requires.

A check raises ValueError with the trainer's own complaint; what the trainer would silently skip
or create is returned, so that a test can require there be none.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import trainer_readers as readers

BRIDGE = readers.BRIDGE
SLIME = readers.SLIME
MILES = "radixark/miles@31f1ca961a94cb860cec3b2dea34ec332bfa8f76"
TRL = readers.TRL


# --- Megatron-Bridge: src/megatron/bridge/data/{packing/config.py, packing/paths.py,
#     builders/gpt_sft.py, base.py, packing/gpt_sft.py}, training/config.py,
#     training/utils/omegaconf_utils.py, recipes/utils/dataset_utils.py, scripts/training/recipe_runner.py

# builders/gpt_sft.py L58-71: kwargs that choose preprocessing; refused beside an explicit `preprocessing`.
SEMANTIC_DATASET_KWARGS = {"add_bos", "add_eos", "add_sep", "answer_only_loss", "chat", "chat_loss_mode",
                           "label_key", "prompt_completion_config", "prompt_template", "truncation_field",
                           "truncation_method", "use_hf_tokenizer_chat_template"}


def bridge_resolves_parquet(spec: str) -> bool:
    """paths.py is_packed_parquet_spec L45-84 and _resolve_parquet_paths L111-213, for a spec with
    no glob characters: a name ending in .parquet/.pq that exists, or a directory holding such files."""
    path = Path(spec)
    if path.is_dir():
        return any(path.glob("*.parquet")) or any(path.glob("*.pq"))
    return spec.lower().endswith((".parquet", ".pq")) and path.exists()


@dataclass
class BridgeSpecs:
    """packing/config.py PackedSequenceSpecs L26-39, with __post_init__ L41-53 and
    _validate_packed_path L55-87 (the parquet branch)."""
    packed_sequence_size: int = -1
    max_single_sequence_length: int | None = None
    tokenizer_model_name: str | None = None
    num_tokenizer_workers: int = -1
    packed_train_data_path: str | None = None
    packed_val_data_path: str | None = None
    packed_metadata_path: str | None = None
    pad_cu_seqlens: bool = False
    pad_seq_to_mult: int | None = 1

    def __post_init__(self) -> None:
        for name in ("packed_train_data_path", "packed_val_data_path"):
            value = getattr(self, name)
            if value is not None and not bridge_resolves_parquet(str(value)):
                raise ValueError(f"{name} must be a .npy file or a packed parquet spec that resolves: {value}")
        if self.pad_seq_to_mult is not None and self.pad_seq_to_mult <= 0:
            raise ValueError("pad_seq_to_mult must be a positive integer when provided.")
        if self.max_single_sequence_length is not None and self.packed_sequence_size > 0 \
                and self.max_single_sequence_length > self.packed_sequence_size:
            raise ValueError("max_single_sequence_length cannot exceed packed_sequence_size.")


@dataclass(kw_only=True)
class BridgeSFTDataset:
    """builders/gpt_sft.py GPTSFTDatasetConfig L104-132 and base.py DataloaderConfig L27-66."""
    seq_length: int
    dataset_root: str | None = None
    hf_dataset: Any = None
    hf_validation_dataset: Any = None
    hf_test_dataset: Any = None
    hf_output_root: str | None = None
    hf_validation_proportion: float | None = None
    hf_rewrite: bool = False
    seed: int = 1234
    memmap_workers: int = 1
    max_train_samples: int | None = None
    preprocessing: Any = None
    enable_offline_packing: bool = False
    offline_packing_specs: BridgeSpecs | None = None
    dataset_kwargs: dict | None = None
    do_validation: bool = True
    do_test: bool = True
    dataloader_type: str | None = "batch"
    num_workers: int = 2
    data_sharding: bool = True
    pin_memory: bool = True
    drop_last: bool = True
    persistent_workers: bool = True
    trust_remote_code: bool | None = None
    dataloader_save: str | None = None
    dataloader_load: str | None = None

    def validate(self) -> None:
        """L134-226 (a Hugging Face source is refused outright here: the export is a local file)."""
        if (self.dataset_root is not None) == (self.hf_dataset is not None):
            raise ValueError("Exactly one text-only SFT source must be set: dataset_root or hf_dataset.")
        if self.hf_dataset is not None:
            raise ValueError("hf_dataset: not this export's source")
        if not str(self.dataset_root).strip():
            raise ValueError("dataset_root must be a non-empty path.")
        if any(v is not None for v in (self.hf_validation_dataset, self.hf_test_dataset, self.hf_output_root,
                                       self.hf_validation_proportion)) or self.hf_rewrite:
            raise ValueError("Hugging Face split and materialization settings require hf_dataset, not dataset_root.")
        if self.seq_length <= 0:
            raise ValueError("seq_length must be greater than 0.")
        if self.enable_offline_packing and self.offline_packing_specs is None:
            raise ValueError("offline_packing_specs must be set when enable_offline_packing=True.")
        if self.offline_packing_specs is not None and not self.enable_offline_packing:
            raise ValueError("enable_offline_packing must be True when offline_packing_specs is set.")
        if self.offline_packing_specs is not None and self.offline_packing_specs.packed_sequence_size <= 0:
            raise ValueError("offline_packing_specs.packed_sequence_size must be greater than 0.")
        if self.dataset_kwargs is not None and not isinstance(self.dataset_kwargs, dict):  # base.py L102-126
            raise ValueError("dataset_kwargs must be a mapping")
        if "max_num_samples" in (self.dataset_kwargs or {}):
            raise ValueError("Set max_train_samples directly; dataset_kwargs must not contain max_num_samples.")
        if SEMANTIC_DATASET_KWARGS & set(self.dataset_kwargs or {}) and self.preprocessing is not None:
            raise ValueError("Do not combine explicit preprocessing with deprecated semantic dataset_kwargs")


@dataclass
class BridgeModel:
    """The model-provider fields the checks below read (their defaults as in Megatron's TransformerConfig)."""
    seq_length: int = 4096
    context_parallel_size: int = 1
    tensor_model_parallel_size: int = 1
    sequence_parallel: bool = False
    calculate_per_token_loss: bool = False


@dataclass
class BridgeTrain:
    micro_batch_size: int = 1
    global_batch_size: int = 128


@dataclass
class BridgeContainer:
    dataset: BridgeSFTDataset
    model: BridgeModel = field(default_factory=BridgeModel)
    train: BridgeTrain = field(default_factory=BridgeTrain)


def bridge_recipe(seq_length: int = 4096, **model: Any) -> BridgeContainer:
    """A finetuning recipe's ConfigContainer as recipes/utils/dataset_utils.py default_squad_config
    L117-149 (through _text_hf_dataset_config L80-114) makes its dataset: a Hugging Face source with
    a validation proportion, offline packing on, pad_to_max_length set."""
    dataset = BridgeSFTDataset(seq_length=seq_length, hf_dataset="squad", hf_validation_proportion=0.1,
                               do_validation=True, do_test=False, preprocessing="prompt-completion",
                               enable_offline_packing=True,
                               offline_packing_specs=BridgeSpecs(packed_sequence_size=seq_length),
                               dataset_kwargs={"pad_to_max_length": True}, seed=5678, num_workers=1,
                               persistent_workers=False)
    return BridgeContainer(dataset, BridgeModel(seq_length=seq_length, **model))


INSTANTIABLE = {"megatron.bridge.data.packing.PackedSequenceSpecs": BridgeSpecs}


def bridge_apply_overrides(target: Any, overrides: dict, where: str = "") -> list[str]:
    """omegaconf_utils.py process_config_with_overrides L105-160: the YAML merged over the
    container (OmegaConf.merge: mappings merge key by key; a dataclass was turned into a mapping of
    its fields, L282-300), then _apply_overrides L454-521: a key the object lacks is logged and
    skipped (returned here); a mapping with `_target_` is instantiated, the merged fields its
    keywords (L478-489); a mapping over a dataclass recurses; anything else is set as it is."""
    skipped = []
    for key, value in overrides.items():
        if not hasattr(target, key):
            skipped.append(f"{where}{key}")
            continue
        current = getattr(target, key)
        if isinstance(value, dict) and "_target_" in value:
            merged = {f.name: getattr(current, f.name) for f in fields(current)} if is_dataclass(current) else {}
            merged.update({k: v for k, v in value.items() if k != "_target_"})
            setattr(target, key, INSTANTIABLE[value["_target_"]](**merged))
        elif is_dataclass(current) and isinstance(value, dict):
            skipped += bridge_apply_overrides(current, value, f"{where}{key}.")
        elif isinstance(current, dict) and isinstance(value, dict):
            setattr(target, key, {**current, **value})
        else:
            setattr(target, key, value)
    return skipped


def bridge_runner_sync(cfg: BridgeContainer) -> None:
    """scripts/training/recipe_runner.py, as run_recipe.py applies it after the overrides:
    sync_offline_packing_alignment L430-468 (a mapping becomes PackedSequenceSpecs; its size follows
    seq_length; pad_seq_to_mult rises to lcm(2*CP if CP > 1, CP*TP with sequence parallelism and
    TP > 1)) and sync_model_dataset_sequence_length L471-487."""
    dataset, model = cfg.dataset, cfg.model
    if dataset.enable_offline_packing:
        specs = dataset.offline_packing_specs
        if specs is None:
            specs = BridgeSpecs()
        elif isinstance(specs, dict):
            specs = BridgeSpecs(**specs)
        dataset.offline_packing_specs = specs
        specs.packed_sequence_size = dataset.seq_length
        cp, tp = model.context_parallel_size, model.tensor_model_parallel_size
        cp_multiple = 2 * cp if cp > 1 else 1
        sp_multiple = cp * tp if model.sequence_parallel and tp > 1 else 1
        specs.pad_seq_to_mult = math.lcm(specs.pad_seq_to_mult or 1, cp_multiple, sp_multiple)
    model.seq_length = dataset.seq_length


def bridge_container_validate(cfg: BridgeContainer) -> None:
    """training/config.py ConfigContainer.validate: L1276-1291 (packing switches; pad_cu_seqlens needs
    pad_to_max_length), L1390-1391 (the dataset's finalize: GPTSFTDatasetConfig.validate,
    builders/gpt_sft.py L228-231), L1574-1596 (context parallelism), L1600-1617 (micro batch 1),
    L1642-1648 (model and dataset sequence lengths equal)."""
    dataset, specs = cfg.dataset, cfg.dataset.offline_packing_specs
    if dataset.enable_offline_packing and specs is None:
        raise ValueError("offline_packing_specs must be set when enable_offline_packing=True.")
    if specs is not None and not dataset.enable_offline_packing:
        raise ValueError("enable_offline_packing must be True when offline_packing_specs is set.")
    if specs is not None and specs.pad_cu_seqlens and (dataset.dataset_kwargs or {}).get("pad_to_max_length") is not True:
        raise ValueError("offline_packing_specs.pad_cu_seqlens=True requires dataset pad_to_max_length=True.")
    dataset.validate()
    if cfg.model.context_parallel_size > 1:
        if cfg.model.seq_length % (2 * cfg.model.context_parallel_size):
            raise ValueError("Sequence length must be divisible by 2 * context parallel size")
        if not cfg.model.calculate_per_token_loss:
            raise ValueError("When finetuning with CP>1, calculate_per_token_loss must be True")
    if dataset.enable_offline_packing:
        if specs.packed_sequence_size <= 0:
            raise ValueError("offline_packing_specs.packed_sequence_size must be greater than 0.")
        if cfg.train.micro_batch_size > 1:
            raise ValueError("Micro batch size should be 1 when training with packed sequence")
    if cfg.model.seq_length != dataset.seq_length:
        raise ValueError("Please ensure sequence length configuration in model config and dataset config match.")


@dataclass
class BridgeTrainSplit:
    """What GPTSFTDatasetBuilder builds for training, and what it would write before that."""
    file: str
    metadata: list | None  # the metadata the dataset loads (with pad_cu_seqlens), else None
    max_seq_length: int
    pad_to_max_length: bool
    answer_only_loss: bool
    pad_seq_to_mult: int | None
    writes: list[str]  # files or directories the builder would create or append to


def bridge_build(dataset: BridgeSFTDataset) -> BridgeTrainSplit:
    """builders/gpt_sft.py GPTSFTDatasetBuilder: __init__ L541-590; prepare_packed_data L603-635
    (rank 0: each split whose packed file does not exist is packed from dataset_root/<split>.jsonl,
    appending to the metadata file, L637-679); the paths L796-895 (without explicit paths they lie in
    dataset_root/packed/<tokenizer>_pad_seq_to_mult<N>_sft_<hash>/, created on first use, L802-825);
    _build_datasets L744-794 and build_gpt_sft_split L427-526; then the packed dataset's
    __init__, packing/gpt_sft.py L74-91 (pad_cu_seqlens needs a metadata file and pad_to_max_length)."""
    specs, root, writes = dataset.offline_packing_specs, Path(dataset.dataset_root), []
    size = -1 if specs is None else specs.packed_sequence_size
    if size <= 0:
        raise ValueError("not a packed dataset: the export's rows would be read as JSONL conversations")
    default_dir = str(root / "packed" / "<tokenizer>_pad_seq_to_mult_sft_<hash>")

    def path(explicit: str | None, name: str) -> str:
        if explicit is not None:
            return str(explicit)
        writes.append(default_dir)
        return f"{default_dir}/{name}"

    metadata_path = path(specs.packed_metadata_path, f"{size}_metadata.jsonl")
    train = path(specs.packed_train_data_path, f"training_{size}.idx.parquet")
    splits = [("training", train)]
    if dataset.do_validation:
        splits.append(("validation", path(specs.packed_val_data_path, f"validation_{size}.idx.parquet")))
    for split, packed in splits:
        if not bridge_resolves_parquet(packed):
            writes += [packed, metadata_path, f"(packed from {root / (split + '.jsonl')})"]
    if not bridge_resolves_parquet(train):
        raise ValueError(f"Dataset path {train} does not exist")
    kwargs = dict(dataset.dataset_kwargs or {})
    pad_to_max_length = kwargs.get("pad_to_max_length", False)
    metadata = None
    if specs.pad_cu_seqlens:  # L463-466: a parquet split reads the metadata only with pad_cu_seqlens
        if not pad_to_max_length:
            raise ValueError("'pad_to_max_length=True' is required when pad_cu_seqlens is enabled")
        metadata = json.loads(Path(metadata_path).read_text())
    return BridgeTrainSplit(train, metadata, size, pad_to_max_length, kwargs.get("answer_only_loss", True),
                            specs.pad_seq_to_mult, writes)


def bridge_launch(overrides: dict, recipe: BridgeContainer) -> tuple[BridgeContainer, BridgeTrainSplit, list[str]]:
    """run_recipe.py's order: the recipe, the overrides, the runner's syncs, validation, the build.
    Returns the container, the training split and the override keys Bridge skipped."""
    skipped = bridge_apply_overrides(recipe, overrides)
    bridge_runner_sync(recipe)
    bridge_container_validate(recipe)
    return recipe, bridge_build(recipe.dataset), skipped


# --- miles and slime: their argument parsers (the flags an SFT launch on exported rows uses) and
#     validation (miles/utils/arguments.py miles_validate_args, slime/utils/arguments.py
#     slime_validate_args) -------------------------------------------------------------------------

@dataclass(frozen=True)
class Flag:
    name: str
    line: int  # where the trainer's arguments.py defines it
    kind: str  # "int", "str", "true" (store_true), "false" (store_false)
    dest: str | None = None
    default: Any = None
    required: bool = False
    choices: tuple | None = None


def _shared_flags(lines: dict[str, int], defaults: dict[str, Any]) -> list[Flag]:
    """The flags both parsers define alike (each at its own line, some with their own default)."""
    spec = [("--prompt-data", "str", None, None), ("--input-key", "str", None, "input"),
            ("--metadata-key", "str", None, "metadata"), ("--label-key", "str", None, None),
            ("--rollout-function-path", "str", None, defaults["--rollout-function-path"]),
            ("--n-samples-per-prompt", "int", None, 1), ("--rollout-batch-size", "int", None, None),
            ("--global-batch-size", "int", None, None), ("--micro-batch-size", "int", None, 1),
            ("--num-rollout", "int", None, None), ("--num-epoch", "int", None, None),
            ("--num-steps-per-rollout", "int", None, None),
            ("--disable-rollout-global-dataset", "false", "rollout_global_dataset", True),
            ("--rollout-shuffle", "true", None, False), ("--use-dynamic-batch-size", "true", None, False),
            ("--max-tokens-per-gpu", "int", None, None), ("--calculate-per-token-loss", "true", None, False),
            ("--disable-compute-advantages-and-returns", "false", "compute_advantages_and_returns", True),
            ("--debug-train-only", "true", None, False)]
    flags = [Flag(name, lines[name], kind, dest, default, required=name == "--rollout-batch-size")
             for name, kind, dest, default in spec]
    return flags + [Flag("--loss-type", lines["--loss-type"], "str", default="policy_loss",
                         choices=("policy_loss", "sft_loss", "custom_loss"))]


# Where each parser defines a flag: (slime/utils/arguments.py at SLIME, miles/utils/arguments.py at
# MILES). slime pre-parses --debug-train-only (L1584-1597).
LINES = {"--prompt-data": (645, 1022), "--input-key": (659, 1050), "--metadata-key": (669, 1060),
         "--label-key": (660, 1051), "--rollout-function-path": (329, 477), "--n-samples-per-prompt": (700, 1091),
         "--rollout-batch-size": (691, 1082), "--global-batch-size": (706, 1097), "--micro-batch-size": (717, 1108),
         "--num-rollout": (609, 982), "--num-epoch": (615, 994), "--num-steps-per-rollout": (708, 1099),
         "--disable-rollout-global-dataset": (627, 1006), "--rollout-shuffle": (413, 575),
         "--use-dynamic-batch-size": (747, 1142), "--max-tokens-per-gpu": (758, 1153),
         "--calculate-per-token-loss": (879, 1354), "--disable-compute-advantages-and-returns": (958, 1438),
         "--debug-train-only": (1594, 2077), "--loss-type": (915, 1396)}
SLIME_FLAGS = _shared_flags({flag: lines[0] for flag, lines in LINES.items()},
                            {"--rollout-function-path": "slime.rollout.sglang_rollout.generate_rollout"})
# miles: the same flags, and those slime lacks
MILES_FLAGS = _shared_flags({flag: lines[1] for flag, lines in LINES.items()}, {"--rollout-function-path": None}) + [
    Flag("--use-dynamic-global-batch-size", 2415, "true", default=False),
    Flag("--disable-rollout-trim-samples", 2409, "true", default=False),
    Flag("--qkv-format", 270, "str", default="thd", choices=("thd", "bshd"))]


def parse_flags(flags: list[Flag], argv: list[str]) -> argparse.Namespace:
    """The flags as the trainer's parser reads them. An unknown flag is an error here: miles parses
    with Megatron's parser, which rejects it (miles/backends/megatron_utils/arguments.py L4); slime
    passes ignore_unknown_args=True (slime/backends/megatron_utils/arguments.py L195) and drops it
    silently, which is worse."""
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for flag in flags:
        dest = {"dest": flag.dest} if flag.dest else {}
        if flag.kind in ("true", "false"):
            parser.add_argument(flag.name, action=f"store_{flag.kind}", **dest)
        else:
            parser.add_argument(flag.name, type=int if flag.kind == "int" else str, default=flag.default,
                                required=flag.required, choices=flag.choices, **dest)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        raise ValueError(f"unknown arguments: {unknown}")
    return args


def slime_validate(args: argparse.Namespace) -> None:
    """slime_validate_args, the checks on these flags: L1867-1870 (dynamic batch size needs
    max_tokens_per_gpu), L1971-1979 (steps per rollout against the global batch), L1993-2005
    (num_epoch needs the global dataset; one of num_epoch, num_rollout)."""
    if args.use_dynamic_batch_size and args.max_tokens_per_gpu is None:
        raise ValueError("max_tokens_per_gpu must be set when use_dynamic_batch_size is set")
    if args.num_steps_per_rollout is not None:
        implied = args.rollout_batch_size * args.n_samples_per_prompt // args.num_steps_per_rollout
        if args.global_batch_size is not None and args.global_batch_size != implied:
            raise ValueError("global_batch_size is not rollout_batch_size * n_samples_per_prompt // steps")
    if args.num_epoch is not None:
        if args.num_rollout is None and not args.rollout_global_dataset:
            raise ValueError("num_epoch is set, but rollout_global_dataset is not set")
    elif args.num_rollout is None:
        raise ValueError("num_epoch is not set, but num_rollout is not set")


def miles_validate(args: argparse.Namespace) -> None:
    """miles_validate_args, the checks on these flags: L3155-3158, L3167-3172 (a dynamic global batch
    needs a dynamic batch size), L3431-3439, L3455-3467, L3514-3518 (bshd refuses a dynamic batch size)."""
    slime_validate(args)  # the same rules at L3155-3158, L3431-3439, L3455-3467
    if args.use_dynamic_global_batch_size and not args.use_dynamic_batch_size:
        raise ValueError("--use-dynamic-global-batch-size requires --use-dynamic-batch-size")
    if args.qkv_format == "bshd" and args.use_dynamic_batch_size:
        raise ValueError("Dynamic batch size is not supported for bshd format.")


def sft_launch_requirements(args: argparse.Namespace, export: Path) -> None:
    """What reading the export as SFT needs beyond the parser: the file is the prompt data (both
    readers take only .parquet or .jsonl by name, slime/utils/data.py L47-60, miles/utils/data.py
    L51-64), read by the global dataset with our keys; the SFT loss (slime's default is the policy
    loss, loss.py L1292-1333); one Sample per prompt (databuild.integrations.miles checks it too)."""
    checks = {"prompt_data": str(export), "input_key": "messages", "metadata_key": "metadata",
              "rollout_global_dataset": True, "n_samples_per_prompt": 1, "loss_type": "sft_loss",
              "rollout_function_path": "databuild.integrations.miles.generate_rollout"}
    for key, expected in checks.items():
        if getattr(args, key) != expected:
            raise ValueError(f"{key}: {getattr(args, key)!r}, the export needs {expected!r}")
    if not Path(args.prompt_data).is_file() or not args.prompt_data.endswith(".parquet"):
        raise ValueError(f"{args.prompt_data}: not a .parquet file")


def miles_loader(path: Path, args: argparse.Namespace) -> readers.SlimeDataSource:
    """miles' reading of the prompt data: miles/utils/data.py read_file L28-71 (a .parquet path:
    ParquetFile.iter_batches, each batch to_pylist) and Dataset.__init__ L186-258 without a chat
    template, processor or tools column (prompt = the input key as it is, a str; metadata = the
    metadata key or {}), then rollout/data_source.py RolloutDataSource.get_samples L91-119 (the next
    n prompts, each a group of n_samples_per_prompt deep copies with group_index and index): the
    same reading as slime's, which tests/support/trainer_readers.py transcribes; the rollout function is
    called through inference_rollout/compatibility.py LegacyRolloutFnAdapter L17-30 as
    fn(args, rollout_id, data_source, evaluation=...), its list wrapped in a RolloutFnTrainOutput
    (base_types.py L52-56)."""
    dataset = readers.SlimeDataset(path, prompt_key=args.input_key, metadata_key=args.metadata_key)
    return readers.SlimeDataSource(dataset, n_samples_per_prompt=args.n_samples_per_prompt)


# --- TRL: trl/trainer/sft_config.py SFTConfig, trl/trainer/sft_trainer.py SFTTrainer.__init__ -------

# sft_config.py: the SFTConfig fields an export's arguments may name, with their defaults (L182-283),
# and transformers' TrainingArguments fields used here.
TRL_FIELDS = {"dataset_text_field": "text", "dataset_kwargs": None, "dataset_num_proc": None, "max_length": 1024,
              "truncation_mode": "keep_start", "shuffle_dataset": False, "packing": False, "packing_strategy": "bfd",
              "padding_free": False, "pad_to_multiple_of": None, "completion_only_loss": None,
              "assistant_only_loss": False, "loss_type": None,
              "output_dir": None, "per_device_train_batch_size": 8, "remove_unused_columns": True,
              # transformers' TrainingArguments, which SFTConfig extends: evaluation of an eval_dataset
              "eval_strategy": "no", "per_device_eval_batch_size": 8}


def trl_config(arguments: dict) -> dict:
    unknown = set(arguments) - set(TRL_FIELDS)
    if unknown:  # a dataclass refuses an unknown keyword
        raise ValueError(f"SFTConfig got unexpected keyword arguments {sorted(unknown)}")
    return {**TRL_FIELDS, **arguments}


def trl_trainer_checks(config: dict, columns: list[str]) -> dict:
    """SFTTrainer.__init__ on a text dataset with no custom collator: L1143 (padding-free is on with
    padding_free, or bfd packing), L1174-1177 (completion_only_loss unset: on only for prompt and
    completion columns), L1244-1249 (padding-free without packing refuses a max_length), L1252-1256
    (skip_prepare_dataset), L1638-1658 (skipping preparation refuses mask columns without labels; with
neither, the loss would cover every token), L1627-1636 (the
    columns kept: input_ids, labels, seq_lengths). Returns what the collator will be given."""
    padding_free = config["padding_free"] or (config["packing"] and config["packing_strategy"] in {"bfd", "bfd_split"})
    completion_only = config["completion_only_loss"]
    if completion_only is None:
        completion_only = "prompt" in columns and "completion" in columns
    if padding_free and not config["packing"] and config["max_length"] is not None:
        raise ValueError("When `padding_free=True` without packing, `max_length` is not enforced.")
    skip_prepare = bool((config["dataset_kwargs"] or {}).get("skip_prepare_dataset", False))
    if skip_prepare and "labels" not in columns and ("completion_mask" in columns or "assistant_masks" in columns):
        raise ValueError("The train dataset has mask columns but no 'labels', and `skip_prepare_dataset=True`")
    kept = [c for c in columns if c in ("input_ids", "labels", "seq_lengths")] \
        if config["remove_unused_columns"] else list(columns)
    return {"padding_free": padding_free, "skip_prepare": skip_prepare, "completion_only_loss": completion_only,
            "columns": kept}
