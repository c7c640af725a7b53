"""TRL itself (when torch and trl are installed; neither is in requirements.lock or CI) reads the
preference export: pinned to trl 1.9.0 (huggingface/trl@f2cd5771's trainer files, the same), with
torch 2.14.1, transformers 5.24.0; it passes at trl 1.16.0 too, within float32's precision there (see
PINNED). DPOTrainer, built as the written script builds it, over a tiny
randomly initialised Llama in float64 on CPU, over pairs the build's own encode stage tokenized and
masked and its row file writer wrote (one with a multi-turn chosen completion, a user turn between its
targets): its per-sequence log-probability sums over the chosen and
rejected completions (its own precompute_ref_log_probs pass, TRL's collator and masking) equal sums
computed here from the native rows alone (the prompt and completion run as one sequence,
log-softmax, summed where the native loss mask is 1), within 1e-9 (measured: at most 2.3e-13 in float64); the same over the tiny preference build as make
and export write it;
after training steps against a frozen reference, its loss on a batch equals the DPO loss from those
independent sums; and the written scripts (DPO and KTO) train on this machine as they are. KTOTrainer, likewise, over
the pairs unpaired: its sums over each completion, and over the mismatched KL pairs its trainer builds.
"""

from __future__ import annotations

import copy
import runpy
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import databuild
from conftest import TOKENIZER_DIR
from databuild.exports.trl_preference import DpoFormat, KtoFormat

torch = pytest.importorskip("torch", reason="torch is not installed (an optional test: pip install torch trl==1.9.0)")
trl = pytest.importorskip("trl", reason="trl is not installed (an optional test: pip install trl==1.9.0)")

# trl 1.9.0, the pinned version, scores in the model's dtype (float64 here): the sums differ by rounding alone
# (about 1e-13). Later releases score through a fused LM head that accumulates in float32 (trl 1.16.0's
# trl/kernels/chunked_logprob.py, L54-62: `acc.addmm_(a.float(), b.float())`), so there they agree to
# float32's precision relative to their size (measured at 1.16.0: up to 6.4e-5 on sums of a few hundred).
PINNED = trl.__version__ == "1.9.0"
TOLERANCE = 1e-9
LOSS_TOLERANCE = TOLERANCE if PINNED else 1e-5


def off_by(found, expected) -> float:
    """The largest difference, as a share of what the installed trl's precision allows (below 1 passes)."""
    found, expected = np.asarray(found, dtype=float), np.asarray(expected, dtype=float)
    allowed = TOLERANCE + (0 if PINNED else 1e-6 * np.abs(expected))
    return float((np.abs(found - expected) / allowed).max())

PAIRS = [  # (prompt messages, chosen reply, rejected reply); a list of turns is a multi-turn completion
    ([("user", "Hi there")], "Hello, friend.", "Go away."),
    ([("system", "Be brief."), ("user", "What is 2+2?")], "4", "It is five, I think, but I am not sure at all."),
    ([("user", "Name a colour."), ("assistant", "Blue."), ("user", "Another one?")], "Red.", "Blue again."),
    ([("user", "Say a long sentence about the sea and the sky.")],
     "The sea is wide and grey, and the sky above it turns slowly from blue to gold.", "No."),
    ([("user", "Count to three.")], "1, 2, 3", "1, 2, 4"),
    ([("user", "Pick a number.")], [("assistant", "Seven."), ("user", "Why that one?"), ("assistant", "It is prime.")],
     "Twelve, because I like it."),
]
MULTI_TURN = 5  # the pair whose chosen completion holds a user turn between its targets


def native_file(directory, unpaired: bool = False):
    """PAIRS through the build's own encode stage (encode/preference.py, the fixture tokenizer's muse_spark
    template and strategy) into a preference row file (rowfile/preference.py); each pair as two unpaired
    rows when `unpaired` (chosen desirable, rejected not: TRL's unpair_preference_dataset). The file, and
    its rows as read back."""
    from databuild.rowfile.preference import PairFigures
    from databuild.rowfile.preference_write import write_pairs
    from pairs import pair, pair_encoder

    records = []
    for number, (prompt, chosen, rejected) in enumerate(PAIRS):
        prompt = tuple({"role": role, "content": text} for role, text in prompt)
        completions = [tuple({"role": role, "content": text} for role, text in
                             (reply if isinstance(reply, list) else [("assistant", reply)])) for reply in (chosen, rejected)]
        if unpaired:
            records += [pair(2 * number, prompt, completions[0], label=True),
                        pair(2 * number + 1, prompt, completions[1], label=False)]
        else:
            records.append(pair(number, prompt, *completions))
    encoded = pair_encoder()[1].encode_batch(records)
    assert all(p.problem is None for p in encoded)
    kind, path = "unpaired" if unpaired else "paired", directory / "native.parquet"
    write_pairs(iter(encoded), path, kind, PairFigures(kind))
    return path, pq.read_table(path)


def tiny_llama(vocab_size: int, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=512,
                         initializer_range=1.0, use_cache=False)
    return LlamaForCausalLM(config).to(dtype).eval()


def target_sum(model, prompt: list[int], completion: list[int], mask: list[int]) -> float:
    """The sum of log p(token | the tokens before it) over the targets `mask` marks in `completion`,
    prompt + completion run alone, unpadded."""
    ids = prompt + completion
    targets = len(prompt) + np.flatnonzero(np.array(mask, dtype=bool))
    assert targets.size and targets[0] > 0
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0], dim=-1)
    return float(logps[targets - 1, torch.tensor(ids)[targets]].sum())


def native_sums(model, native: pa.Table, sides=("chosen", "rejected")) -> dict[str, np.ndarray]:
    """Per row and side: the native targets' sum."""
    return {side: np.array([target_sum(model, r["prompt_input_ids"], r[f"{side}_input_ids"], r[f"{side}_loss_mask"])
                            for r in native.to_pylist()]) for side in sides}


def exported(directory, fmt, made: bool = False):
    """Pairs exported by `fmt` into `directory` (rows, arguments, script), their native rows, and the
    script's trainer class: PAIRS through the encode stage, or (`made`) the tiny preference build made and
    exported by databuild's own make and export."""
    from transformers import AutoTokenizer
    from ruamel.yaml import YAML

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    kind, out = fmt.kind.lower(), directory / "pairs.parquet"
    if made:
        from databuild.config import resolve_config
        from databuild.preference.build import make_preference

        source = make_preference(resolve_config("muse-spark-tiny-preference-v1"), directory / "build").parquet
        databuild.export(source, fmt.name, out)
        native = pq.read_table(source)
    else:
        source, native = native_file(directory, unpaired=fmt.kind == "KTO")
        pq.write_table(pa.concat_tables(fmt.convert(block) for block in fmt.blocks(source)), out)
        for name, text in fmt.trainer_config(out, 0, native.num_rows).items():
            (directory / name).write_text(text)
    arguments = YAML(typ="safe", pure=True).load((directory / f"pairs.{kind}.yaml").read_text())
    script = runpy.run_path(str(directory / f"pairs.{kind}.py"), run_name=f"databuild_{kind}_script")
    return directory, out, native, tokenizer, arguments, script[f"Tokenized{fmt.kind}Trainer"]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return exported(tmp_path_factory.mktemp("dpo"), DpoFormat())


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    return exported(tmp_path_factory.mktemp("made"), DpoFormat(), made=True)


def test_dpo_trainer_sums_the_targets_of_a_made_build(made, tmp_path):
    """The same over the tiny preference build (configs/muse-spark-tiny-preference-v1.yaml: Tulu-shaped
    pairs, multi-turn prompts among them) as `databuild make` and `databuild export --to trl-dpo` write it."""
    native = made[2]
    model = tiny_llama(len(made[3]))
    trainer = trainer_over(made, model, tmp_path, precompute_ref_log_probs=True)
    expected = native_sums(model, native)
    for side in expected:
        found = np.array(trainer.train_dataset[f"ref_{side}_logps"])
        difference = np.abs(found - expected[side]).max()
        assert off_by(found, expected[side]) < 1, (side, difference)
        print(f"made {side} ({native.num_rows} pairs): max |TRL - native| = {difference:.3g}")


def trainer_over(export, model, tmp_path, ref_model=None, config_class=None, **settings):
    from datasets import load_dataset

    directory, out, native, tokenizer, arguments, trainer_class = export
    config = (config_class or trl.DPOConfig)(output_dir=str(tmp_path / "run"), report_to=[], save_strategy="no", use_cpu=True,
                           bf16=False, seed=0, logging_steps=1, per_device_train_batch_size=2,
                           **{**arguments, **settings})
    dataset = load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    return trainer_class(model=model, ref_model=ref_model, args=config, train_dataset=dataset, processing_class=tokenizer)


def test_dpo_trainer_sums_the_native_targets(export, tmp_path):
    """TRL's own per-sequence sums (its precompute pass: its collator pads pairs of different lengths to
    the right, its masking keeps the completion) equal the native targets' sums."""
    native = export[2]
    model = tiny_llama(len(export[3]))
    trainer = trainer_over(export, model, tmp_path, precompute_ref_log_probs=True)
    expected = native_sums(model, native)
    found = {side: np.array(trainer.train_dataset[f"ref_{side}_logps"]) for side in ("chosen", "rejected")}
    for side in found:
        assert found[side].shape == expected[side].shape
        difference = np.abs(found[side] - expected[side]).max()
        assert off_by(found[side], expected[side]) < 1, (side, difference)
        print(f"{side}: max |TRL - native| = {difference:.3g}")
    assert not np.allclose(expected["chosen"], expected["rejected"])  # the test can tell the sides apart
    # The test can tell what the cut and the masks do. TRL's own collator, which trains every completion
    # token, over the native completions as they are (the assistant header among them): far from the native
    # sums; over the export's rows: equal where the target masks are all ones, far off for the multi-turn
    # completion, whose user turn it would train.
    stock = trl.trainer.dpo_trainer.DataCollatorForPreference(pad_token_id=export[3].eos_token_id)
    uncut = [{"prompt_ids": r["prompt_input_ids"], "chosen_ids": r["chosen_input_ids"],
              "rejected_ids": r["rejected_input_ids"]} for r in native.to_pylist()]
    uncut_chosen, _ = trainer.compute_ref_log_probs(model, stock(uncut))
    assert np.abs(uncut_chosen.numpy() - expected["chosen"]).min() > 1.0
    stock_chosen, _ = trainer.compute_ref_log_probs(model, stock([trainer.train_dataset[r] for r in range(len(PAIRS))]))
    off = np.abs(stock_chosen.numpy() - expected["chosen"])
    assert off[MULTI_TURN] > 1.0
    assert off_by(np.delete(stock_chosen.numpy(), MULTI_TURN), np.delete(expected["chosen"], MULTI_TURN)) < 1
    assert 0 in trainer.train_dataset[MULTI_TURN]["chosen_target_mask"]


def test_dpo_loss_after_training_equals_the_native_loss(export, tmp_path):
    """Three steps against a frozen reference; then TRL's loss on a batch of two pairs equals
    -log sigmoid(beta * ((pc - rc) - (pr - rr))) from the independent sums of policy and reference."""
    native = export[2]
    model = tiny_llama(len(export[3]))
    reference = copy.deepcopy(model)
    trainer = trainer_over(export, model, tmp_path, reference, max_steps=3, learning_rate=1e-2, beta=0.1)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(np.isfinite(losses))
    model.eval()
    policy_sums, reference_sums = native_sums(model, native), native_sums(reference, native)
    assert np.abs(policy_sums["chosen"] - reference_sums["chosen"]).max() > 1e-3  # training moved the policy
    batch = trainer.data_collator([trainer.train_dataset[r] for r in (0, 1)])
    with torch.no_grad():
        loss = float(trainer.compute_loss(model, batch))
    margins = ((policy_sums["chosen"] - reference_sums["chosen"]) - (policy_sums["rejected"] - reference_sums["rejected"]))[:2]
    expected = float(np.mean(np.logaddexp(0.0, -0.1 * margins)))  # -log sigmoid(x) = log(1 + exp(-x))
    assert abs(loss - expected) < LOSS_TOLERANCE, (loss, expected)


@pytest.mark.parametrize("fmt", [DpoFormat, KtoFormat])
def test_the_script_runs_here_as_written(tmp_path, fmt):
    """The written script, on a model saved here, trains two steps: bf16 only where the machine has it,
    DPOConfig / KTOConfig arguments after OUTPUT_DIR replacing its defaults."""
    directory, out, native, tokenizer, arguments, trainer_class = exported(tmp_path, fmt())
    model_dir = tmp_path / "model"
    tiny_llama(len(tokenizer), torch.float32).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    ran = subprocess.run([sys.executable, str(directory / f"pairs.{fmt.kind.lower()}.py"), str(model_dir),
                          str(tmp_path / "run"), "--max_steps", "2", "--report_to", "none", "--save_strategy", "no",
                          "--logging_steps", "1", "--per_device_train_batch_size", "2"], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines()[0].startswith("bf16 ")
    assert "'train_loss'" in ran.stdout + ran.stderr


def test_kto_trainer_sums_the_native_targets(export, tmp_path):
    """KTOTrainer over the unpaired export (each pair as a desirable and an undesirable row): its own
    per-sequence sums (precompute pass) equal the native targets' sums, and its KL sums are those of each
    prompt with the completion before it in its batch of two (the rotation the script's trainer writes, as
    TRL's own _prepare_dataset does)."""
    (tmp_path / "kto").mkdir()
    kto = exported(tmp_path / "kto", KtoFormat())
    native = kto[2]
    model = tiny_llama(len(export[3]))
    trainer = trainer_over(kto, model, tmp_path, config_class=trl.KTOConfig, precompute_ref_log_probs=True)
    expected = native_sums(model, native, ("completion",))["completion"]
    found = np.array(trainer.train_dataset["ref_logps"])
    difference = np.abs(found - expected).max()
    assert off_by(found, expected) < 1, difference
    print(f"KTO completion: max |TRL - native| = {difference:.3g}")
    rows = pq.read_table(kto[1]).to_pylist()
    before = [r - 1 if r % 2 else r + 1 for r in range(len(rows))]  # batches of two: (x1, y2), (x2, y1)
    kl = np.array([target_sum(model, rows[r]["prompt_ids"], rows[b]["completion_ids"], rows[b]["completion_target_mask"])
                   for r, b in enumerate(before)])
    assert off_by(trainer.train_dataset["ref_KL_logps"], kl) < 1
    assert np.abs(kl - expected).min() > 1.0  # the test can tell the KL pairs from the matched ones
