"""The ConfSMoE experiment settings from the command line: train and evaluate one preset on its TFDS data.

    python -m icml26zoo.moe.multimodal_cli --preset setting_II --data-dir ~/tensorflow_datasets \
        [--workdir runs/confsmoe_II] [task.missing_ratio=0.3] [train.steps=300] [moe.router=topk_softmax]

A preset (`zoo.moe.multimodal_train.PRESETS`: setting_I, setting_II, setting_III) fixes the task, the
model and the training; `section.field=value` overrides one field, where section is `task`
(`MultimodalTaskConfig`), `model` (`ConfSMoEConfig`), `moe` (its `MoEConfig`) or `train`
(`multimodal_train.TrainConfig`); the model's feature_dims, tokens and num_classes always follow the task's.
Values are Python literals (`(0.2, 0.4)`, `True`, `0.5`) or bare strings.
The data comes from the `zoo_multimodal` TFDS builder (`train.data.multimodal`, built offline on first use
under --data-dir). It prints accuracy, macro F1 and AUC with and without stage-2 imputation, and layer 0's
expert load and collapse indicator; with --workdir it also writes them to results.json. A bad preset,
override or value exits with a one-line error naming it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import pathlib
from collections.abc import Sequence
from typing import Any

from icml26zoo.moe.multimodal_train import PRESETS, evaluate_classifier, train_classifier

SECTIONS = ("task", "model", "moe", "train")


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def apply_overrides(preset: tuple[Any, Any, Any], overrides: Sequence[str]) -> tuple[Any, Any, Any]:
    """(task, model, train) configs of `preset` with `section.field=value` overrides (one replace per section,
    so coupled fields change together).

    Raises ValueError naming the override for a malformed one or an unknown section or field, and the
    section's overrides for values its config rejects.
    """
    sections = dict(zip(("task", "model", "train"), preset, strict=True))
    sections["moe"] = sections["model"].moe
    changes: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
    for override in overrides:
        key, equals, text = override.partition("=")
        section, dot, field = key.partition(".")
        if not equals or not dot:
            raise ValueError(f"override {override!r} must look like section.field=value")
        if section not in SECTIONS:
            raise ValueError(f"override {override!r}: section must be one of {list(SECTIONS)}, got {section!r}")
        names = [f.name for f in dataclasses.fields(sections[section])]
        if field not in names or (section == "model" and field in ("moe", "feature_dims", "tokens", "num_classes")):
            raise ValueError(f"override {override!r}: {section} has no field {field!r}; fields: {names}")
        value = _literal(text)
        changes[section][field] = tuple(value) if isinstance(value, list) else value
    for section in SECTIONS:
        # One replace per section: coupled fields (feature_dims and signal) change together.
        try:
            sections[section] = dataclasses.replace(sections[section], **changes[section])
        except (ValueError, TypeError) as error:
            raise ValueError(f"overrides {changes[section]} of {section}: {error}") from None
    task = sections["task"]
    model = dataclasses.replace(sections["model"], moe=sections["moe"], feature_dims=task.feature_dims,
                                tokens=task.tokens, num_classes=task.num_classes)
    return task, model, sections["train"]


def run(preset: str, data_dir: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Trains `preset` (with `overrides`) on its TFDS data and returns the evaluation on the test split."""
    # Imported here: the TFDS builder needs the [train] extra, the rest of zoo.moe does not.
    from icml26zoo.train.data.multimodal import load_multimodal

    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {preset!r}")
    task, model, train = apply_overrides(PRESETS[preset], overrides)
    data = load_multimodal(task, data_dir)
    trained = train_classifier(data, model, train, log_every=max(1, train.steps // 10))
    results: dict[str, Any] = {"preset": preset, "overrides": list(overrides), "router": model.moe.router,
                               "curve": trained.curve}
    for impute in (True, False):
        metrics = evaluate_classifier(trained, data.test, impute=impute)
        tag = "impute" if impute else "no_impute"
        results.update({f"{tag}/{name}": metrics[name] for name in ("accuracy", "f1", "auc", "collapse")})
        results[f"{tag}/load"] = [float(share) for share in metrics["load"]]
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, choices=sorted(PRESETS))
    parser.add_argument("--data-dir", required=True, help="TFDS directory (the dataset is built there offline)")
    parser.add_argument("--workdir", help="where to write results.json")
    parser.add_argument("overrides", nargs="*", help="section.field=value")
    args = parser.parse_args(argv)
    try:
        results = run(args.preset, args.data_dir, args.overrides)
    except ValueError as error:
        parser.error(str(error))
    for key, value in results.items():
        if key != "curve":
            print(f"{key:>22}: {value}")
    if args.workdir:
        path = pathlib.Path(args.workdir)
        path.mkdir(parents=True, exist_ok=True)
        (path / "results.json").write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
