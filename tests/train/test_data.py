"""End-to-end tests of the data layer on real TFDS datasets built offline into a temporary directory."""

import dataclasses
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow_datasets as tfds

from icml26zoo.train import data as zoo_data
from icml26zoo.train.config import DataConfig
from icml26zoo.train.data import mqar, pipeline, pystdlib, tfds_files
from icml26zoo.train.errors import RunError

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY_TRAIN, TINY_EVAL = 40, 9
FIELDS = ("inputs", "targets", "segment_ids", "positions", "weights")


def tiny_text(index: int) -> str:
    """Deterministic texts of varied length (some empty or 1 byte: those have nothing to predict)."""
    rng = np.random.default_rng(index)
    return "".join(rng.choice(list("abcdefgh é\n"), size=int(rng.integers(0, 90))))


class ZooTestTinyText(tfds.core.GeneratorBasedBuilder):
    """A user's own TFDS dataset with a string feature named "content" (read as tfds:zoo_test_tiny_text)."""

    VERSION = tfds.core.Version("1.0.0")
    code_path = None  # No checksums to look up (see train/data/generated.py).

    def _info(self):
        features = tfds.features.FeaturesDict({"content": tfds.features.Text()})
        return tfds.core.DatasetInfo(builder=self, features=features, disable_shuffling=True)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, TINY_TRAIN),
                "validation": self._generate_examples(TINY_TRAIN, TINY_TRAIN + TINY_EVAL)}

    def _generate_examples(self, first, end):
        for index in range(first, end):
            yield f"{index:04d}", {"content": tiny_text(index)}


@pytest.fixture(scope="session")
def data_root(tmp_path_factory):
    """One data_dir with the full pystdlib corpus, a small MQAR and the tiny user dataset, built once."""
    root = str(tmp_path_factory.mktemp("zoo_data"))
    zoo_data.prepare(DataConfig(name="pystdlib", data_dir=root))
    ZooTestTinyText(data_dir=root, file_format="array_record").download_and_prepare()
    return root


def small_mqar(root, **changes):
    fields = dict(name="mqar", data_dir=root, mqar_num_keys=16, mqar_num_values=8, mqar_num_pairs=4,
                  mqar_train_examples=50, mqar_eval_examples=13)
    return DataConfig(**{**fields, **changes})


def tiny(root, **changes):
    return DataConfig(**{"name": "tfds:zoo_test_tiny_text", "data_dir": root, "text_feature": "content",
                         **changes})


def take(iterator, count):
    return [next(iterator) for _ in range(count)]


def assert_batches_equal(left, right):
    assert len(left) == len(right)
    for a, b in zip(left, right, strict=True):
        for name in FIELDS:
            np.testing.assert_array_equal(a[name], b[name])


def test_stdlib_files_sorted_filtered_and_split_by_file():
    files = pystdlib.stdlib_files()
    assert files == sorted(files) and len(files) == len(set(files)) > 500
    assert not any({"site-packages", "dist-packages", "__pycache__"} & set(f.split("/")) for f in files)
    assert all(f.endswith(".py") for f in files)
    splits = pystdlib.split_files(files)
    assert not set(splits["train"]) & set(splits["validation"])
    assert sorted(splits["train"] + splits["validation"]) == files
    assert 0.01 < len(splits["validation"]) / len(files) < 0.06


def test_pystdlib_dataset_holds_the_files_in_order(data_root):
    builder = pystdlib.make_builder(data_root)
    root = pystdlib.stdlib_root()
    expected = pystdlib.split_files(pystdlib.stdlib_files())
    total = 0
    for split in ("train", "validation"):
        source = builder.as_data_source(split=split)
        paths = [source[i]["path"].decode() for i in range(len(source))]
        assert paths == expected[split]
        for index in (0, len(source) // 2, len(source) - 1):
            assert source[index]["text"] == (root / paths[index]).read_bytes()
        total += sum(len(source[i]["text"]) for i in range(len(source)))
    assert total == sum((root / f).stat().st_size for f in pystdlib.stdlib_files())
    if sys.version_info[:2] == (3, 11):  # The documented size is the one measured for Python 3.11.
        mb = f"{total / 1e6:.1f} MB"
        assert f"{len(pystdlib.stdlib_files())} files" in pystdlib.__doc__ and mb in pystdlib.__doc__


def test_unigram_baseline_is_sane_on_pystdlib(data_root):
    config = DataConfig(data_dir=data_root)
    train, valid = (zoo_data.unigram_bits_per_byte(config, s) for s in ("train", "validation"))
    assert 4.0 < train < valid < 6.0  # ASCII-heavy source code: well below 8 bits/byte.


def test_tensorflow_is_never_imported(tmp_path):
    # A fake `tensorflow` package is importable, so any import of it (even a guarded one) is recorded.
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    marker = tmp_path / "imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write('imported')\n")
    script = (
        "import sys\n"
        "from train import data\nfrom train.config import DataConfig\n"
        f"c = DataConfig(name='mqar', data_dir={str(tmp_path)!r}, mqar_train_examples=20,"
        " mqar_eval_examples=4)\n"
        "kw = dict(batch_size=2, seq_len=32, process_index=0, process_count=1)\n"
        "next(data.make_train_iterator(c, seed=0, **kw))\n"
        "next(data.make_eval_iterator(c, **kw))\n"
        "assert 'tensorflow' not in sys.modules\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'fake'}{os.pathsep}{REPO}", "JAX_PLATFORMS": "cpu"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not marker.exists()


def check_mqar_example(tokens, num_keys, num_values, num_pairs):
    """Keys distinct and in the key range, values in the value range, each answer the queried key's value."""
    keys, values = tokens[0 : 2 * num_pairs : 2].tolist(), tokens[1 : 2 * num_pairs : 2].tolist()
    pairs = dict(zip(keys, values, strict=True))
    assert len(pairs) == num_pairs and all(1 <= k <= num_keys for k in pairs)
    assert all(num_keys < v <= num_keys + num_values for v in pairs.values())
    queries, answers = tokens[2 * num_pairs :: 2].tolist(), tokens[2 * num_pairs + 1 :: 2].tolist()
    assert sorted(queries) == sorted(pairs) and answers == [pairs[q] for q in queries]


def test_mqar_generator_is_correct_and_deterministic():
    tokens = mqar.generate(16, 8, 4, 200, seed=3)
    assert tokens.shape == (200, 16) and tokens.dtype == np.int32
    for row in tokens:
        check_mqar_example(row, 16, 8, 4)
    np.testing.assert_array_equal(tokens, mqar.generate(16, 8, 4, 200, seed=3))
    assert not np.array_equal(tokens, mqar.generate(16, 8, 4, 200, seed=4))
    assert mqar.answer_mask(4).nonzero()[0].tolist() == [9, 11, 13, 15]
    with pytest.raises(ValueError, match="mqar_num_pairs"):
        mqar.generate(4, 8, 5, 10, seed=0)


def test_mqar_dataset_and_batches_answer_the_queried_keys(data_root):
    config = small_mqar(data_root)
    zoo_data.prepare(config)
    builder = mqar.ZooMqar.for_config(data_root, zoo_data.sources.mqar_config(config))
    stored = np.stack([builder.as_data_source("train")[i]["tokens"] for i in range(50)])
    np.testing.assert_array_equal(stored, mqar.generate(16, 8, 4, 50, np.random.SeedSequence([0, 0])))
    assert zoo_data.vocab_size(config) == 1 + 16 + 8 and zoo_data.bytes_per_token(config) is None
    for pack in (True, False):
        batch = next(zoo_data.make_train_iterator(dataclasses.replace(config, pack=pack), batch_size=4, seq_len=40,
                                                  seed=0, process_index=0, process_count=1))
        assert batch["weights"].sum() == 4 * 4 * (2 if pack else 1)  # 2 whole 15-pair examples per row.
        for row in range(4):
            for segment in np.unique(batch["segment_ids"][row][batch["segment_ids"][row] > 0]):
                where = batch["segment_ids"][row] == segment
                tokens = np.append(batch["inputs"][row][where], batch["targets"][row][where][-1])
                check_mqar_example(tokens, 16, 8, 4)
                answers = batch["weights"][row][where] > 0
                np.testing.assert_array_equal(batch["targets"][row][where][answers], tokens[9::2])
    with pytest.raises(ValueError, match="seq_len"):
        zoo_data.make_train_iterator(config, batch_size=4, seq_len=14, seed=0, process_count=1)


def test_train_epoch_holds_every_pair_of_the_split_once(data_root):
    config = tiny(data_root)
    documents = [zoo_data.encode(tiny_text(i)) for i in range(TINY_TRAIN)]
    expected = sorted((d[i], d[i + 1]) for d in documents for i in range(len(d) - 1))
    rows_per_epoch = -(-len(expected) // 16)
    iterator = zoo_data.make_train_iterator(config, batch_size=4, seq_len=16, seed=5, process_index=0,
                                            process_count=1)
    rows = [{k: b[k][r] for k in FIELDS} for b in take(iterator, -(-rows_per_epoch // 4)) for r in range(4)]
    epoch = rows[:rows_per_epoch]
    pairs = sorted((i, t) for row in epoch for i, t, w in zip(row["inputs"], row["targets"], row["weights"],
                                                               strict=True) if w > 0)
    assert pairs == expected
    assert all(row["segment_ids"][0] == 1 for row in epoch)  # Only the last row of an epoch has padding.
    assert sum((row["weights"] == 0).sum() for row in epoch[:-1]) == 0


def test_resume_from_state_gives_the_same_batches_across_epochs(data_root):
    config = tiny(data_root)
    kwargs = dict(batch_size=4, seq_len=128, seed=7, process_index=0, process_count=1)
    reference = take(zoo_data.make_train_iterator(config, **kwargs), 12)
    lengths = zoo_data.sources.open_split(config, "train").lengths()
    rows_per_epoch = pipeline.Layout(np.maximum(lengths - 1, 0), 128, "concat", 7).rows_per_epoch
    assert 3 * 4 < rows_per_epoch < 12 * 4  # The resumed batches cross an epoch boundary.
    iterator = zoo_data.make_train_iterator(config, **kwargs)
    take(iterator, 3)
    state = json.loads(json.dumps(iterator.get_state()))
    resumed = zoo_data.make_train_iterator(config, **kwargs)
    resumed.set_state(state)
    assert_batches_equal(take(resumed, 9), reference[3:])
    other_seed = next(zoo_data.make_train_iterator(config, **{**kwargs, "seed": 8}))
    assert not np.array_equal(other_seed["inputs"], reference[0]["inputs"])


@pytest.mark.parametrize("name", ["pystdlib", "mqar"])
def test_process_shards_are_disjoint_parts_of_the_global_batch(data_root, name):
    config = small_mqar(data_root) if name == "mqar" else DataConfig(data_dir=data_root)
    kwargs = dict(batch_size=8, seq_len=64, seed=1)
    single = take(zoo_data.make_train_iterator(config, **kwargs, process_index=0, process_count=1), 3)
    shards = [take(zoo_data.make_train_iterator(config, **kwargs, process_index=p, process_count=4), 3)
              for p in range(4)]
    for step in range(3):
        for key in FIELDS:
            assert shards[0][step][key].shape[0] == 2
            joined = np.concatenate([shard[step][key] for shard in shards])
            np.testing.assert_array_equal(joined, single[step][key])
    rows = {shard[0]["inputs"][r].tobytes() for shard in shards for r in range(2)}
    assert len(rows) == 8  # No two processes got the same row.


def test_pystdlib_batches_have_the_documented_format(data_root):
    config = DataConfig(data_dir=data_root)
    batch = next(zoo_data.make_train_iterator(config, batch_size=4, seq_len=128, seed=0, process_index=0,
                                              process_count=1))
    dtypes = {"inputs": np.int32, "targets": np.int32, "segment_ids": np.int32, "positions": np.int32,
              "weights": np.float32}
    assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {k: ((4, 128), d) for k, d in dtypes.items()}
    same = (batch["segment_ids"][:, 1:] == batch["segment_ids"][:, :-1]) & (batch["segment_ids"][:, 1:] > 0)
    np.testing.assert_array_equal(batch["targets"][:, :-1][same], batch["inputs"][:, 1:][same])
    assert zoo_data.vocab_size(config) == 256 and zoo_data.bytes_per_token(config) == 1.0
    text = zoo_data.decode(batch["inputs"][0])
    assert len(text) > 0 and isinstance(text, str)


@pytest.mark.parametrize("pack", [True, False])
def test_eval_pass_is_finite_padded_and_process_count_invariant(data_root, pack):
    config = tiny(data_root, pack=pack)
    documents = [zoo_data.encode(tiny_text(i)) for i in range(TINY_TRAIN, TINY_TRAIN + TINY_EVAL)]
    total_pairs = sum(min(max(len(d) - 1, 0), 16) if not pack else max(len(d) - 1, 0) for d in documents)
    kwargs = dict(batch_size=6, seq_len=16)
    single = list(zoo_data.make_eval_iterator(config, **kwargs, process_index=0, process_count=1))
    assert len(single) == zoo_data.num_eval_batches(config, **kwargs) > 1
    assert all(b["inputs"].shape == (6, 16) for b in single)
    assert sum(b["weights"].sum() for b in single) == total_pairs
    assert single[-1]["weights"][-1].sum() == 0  # The last batch is padded with weight-0 rows.
    shards = [list(zoo_data.make_eval_iterator(config, **kwargs, process_index=p, process_count=3))
              for p in range(3)]
    assert {len(shard) for shard in shards} == {len(single)}
    for step, batch in enumerate(single):
        np.testing.assert_array_equal(np.concatenate([s[step]["inputs"] for s in shards]), batch["inputs"])
    capped = list(zoo_data.make_eval_iterator(config, **kwargs, process_count=1, max_batches=1))
    assert_batches_equal(capped, single[:1])


def test_bad_arguments_raise_value_errors_naming_them(data_root):
    config = tiny(data_root)
    with pytest.raises(ValueError, match="batch_size"):
        zoo_data.make_train_iterator(config, batch_size=6, seq_len=8, seed=0, process_count=4)
    with pytest.raises(ValueError, match="process_index"):
        zoo_data.make_eval_iterator(config, batch_size=4, seq_len=8, process_index=2, process_count=2)
    with pytest.raises(ValueError, match="seq_len"):
        zoo_data.make_train_iterator(config, batch_size=4, seq_len=0, seed=0, process_count=1)
    with pytest.raises(ValueError, match="no_such_dataset"):
        zoo_data.make_train_iterator(tiny(data_root, name="tfds:no_such_dataset"), batch_size=4, seq_len=8,
                                     seed=0, process_index=0, process_count=1)
    with pytest.raises(ValueError, match="text_feature"):
        zoo_data.make_train_iterator(tiny(data_root, text_feature="body"), batch_size=4, seq_len=8, seed=0,
                                     process_index=0, process_count=1)
    with pytest.raises(ValueError, match="'test'"):
        zoo_data.make_eval_iterator(tiny(data_root, eval_split="test"), batch_size=4, seq_len=8,
                                    process_index=0, process_count=1)


def test_default_process_index_and_count_come_from_jax(data_root):
    import jax

    batch = next(zoo_data.make_train_iterator(tiny(data_root), batch_size=2, seq_len=8, seed=0))
    assert batch["inputs"].shape == (2 // jax.process_count(), 8)


def test_data_dir_resolution(monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", "/tmp/from_env")
    assert zoo_data.data_dir(DataConfig(data_dir="/tmp/explicit")) == "/tmp/explicit"
    assert zoo_data.data_dir(DataConfig()) == "/tmp/from_env"
    monkeypatch.delenv("ZOO_DATA_DIR")
    default = pathlib.Path("~/.cache/zoo/tensorflow_datasets").expanduser()
    assert zoo_data.data_dir(DataConfig()) == str(default)


def test_prepare_is_idempotent_and_safe_to_call_concurrently(tmp_path, capsys, caplog):
    caplog.set_level(logging.INFO, logger="icml26zoo.train.data.sources")
    config = small_mqar(str(tmp_path), mqar_train_examples=30)
    errors = []

    def run():
        try:
            zoo_data.prepare(config)
        except Exception as error:  # noqa: BLE001 - reported below.
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    info = next(tmp_path.glob("zoo_mqar/*/1.0.0/dataset_info.json"))
    before = info.stat().st_mtime_ns
    zoo_data.prepare(config)
    assert info.stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.glob("zoo_mqar/k*/*")] == ["1.0.0"]  # No incomplete leftovers.
    builds = [r for r in caplog.records if r.getMessage().startswith("building dataset zoo_mqar")]
    assert len(builds) == 1  # Built once, under the lock.
    assert "Downloading and preparing" not in capsys.readouterr().out  # TFDS's print for a download that is none


def test_unigram_baseline_matches_hand_computation(data_root):
    config = tiny(data_root)
    train = b"".join(tiny_text(i).encode() for i in range(TINY_TRAIN))
    valid = b"".join(tiny_text(i).encode() for i in range(TINY_TRAIN, TINY_TRAIN + TINY_EVAL))
    counts = {b: train.count(bytes([b])) for b in range(256)}
    expected = -np.mean([np.log2((counts[b] + 1) / (len(train) + 256)) for b in valid])
    assert zoo_data.unigram_bits_per_byte(config, "validation") == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="mqar"):
        zoo_data.unigram_bits_per_byte(small_mqar(data_root), "validation")


def copy_prepared(data_root: str, target: pathlib.Path, name: str) -> pathlib.Path:
    """The tiny text dataset's prepared files copied under `target` as an unregistered dataset `name`."""
    folder = target / name / "1.0.0"
    shutil.copytree(pathlib.Path(data_root) / "zoo_test_tiny_text" / "1.0.0", folder)
    for shard in folder.glob("zoo_test_tiny_text-*"):
        shard.rename(folder / shard.name.replace("zoo_test_tiny_text", name))
    info = json.loads((folder / "dataset_info.json").read_text())
    (folder / "dataset_info.json").write_text(json.dumps({**info, "name": name}))
    return folder


def test_a_doctored_features_file_is_refused_before_tfds_imports_its_module(data_root, tmp_path, monkeypatch):
    folder = copy_prepared(data_root, tmp_path / "data", "zoo_doctored_text")
    (tmp_path / "zoo_probe_feature.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    features = (folder / "features.json").read_text()
    assert "tensorflow_datasets.core.features.text_feature.Text" in features
    (folder / "features.json").write_text(
        features.replace("tensorflow_datasets.core.features.text_feature.Text", "zoo_probe_feature.Feature"))
    config = DataConfig(name="tfds:zoo_doctored_text", data_dir=str(tmp_path / "data"), text_feature="content")
    with pytest.raises(RunError, match=r"features.json' names feature class 'zoo_probe_feature.Feature'"):
        zoo_data.prepare(config)
    assert "zoo_probe_feature" not in sys.modules
    # What the check prevents: TFDS itself imports the module the file names.
    with pytest.raises(ValueError, match="Unrecognized FeatureConnector type"):
        tfds.builder("zoo_doctored_text", data_dir=str(tmp_path / "data"))
    assert sys.modules.pop("zoo_probe_feature").IMPORTED


def test_an_untouched_copy_of_a_prepared_dataset_reads(data_root, tmp_path):
    copy_prepared(data_root, tmp_path, "zoo_copied_text")
    config = DataConfig(name="tfds:zoo_copied_text", data_dir=str(tmp_path), text_feature="content")
    batch = next(zoo_data.make_train_iterator(config, batch_size=2, seq_len=8, seed=0, process_count=1,
                                              process_index=0))
    assert batch["inputs"].shape == (2, 8)


@pytest.mark.parametrize("document", [
    {"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
     "featuresDict": {"features": {"x": {"pythonClassName": "tensorflow_datasets.core.features.sequence_feature"
                                                             ".Sequence",
                                         "sequence": {"feature": {"pythonClassName": "evil.Feature"}}}}}},
    {"type": "evil.Feature", "content": {}},
    {"name": "d", "features": {"python_class_name": "evil.Feature"}},
    {"pythonClassName": "tensorflow_datasets.core.features_evil.Feature"},
], ids=["nested", "legacy_type", "dataset_info", "near_miss"])
def test_foreign_feature_classes_are_found_at_any_depth(document, tmp_path):
    path = tmp_path / "features.json"
    path.write_text(json.dumps(document))
    with pytest.raises(RunError, match=r"names feature class '(evil|[a-z_.]+features_evil)\.Feature'"):
        tfds_files.check_metadata_file(path)


def test_tfds_feature_classes_and_feature_names_that_look_like_keys_pass(tmp_path):
    document = {"pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
                "featuresDict": {"features": {"type": {"pythonClassName": "tensorflow_datasets.features.Text"},
                                              "content": {"pythonClassName":
                                                          "tensorflow_datasets.core.features.text_feature.Text"}}}}
    path = tmp_path / "features.json"
    path.write_text(json.dumps(document))
    tfds_files.check_metadata_file(path)
    assert sorted(tfds_files.feature_classes(document)) == [
        "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "tensorflow_datasets.core.features.text_feature.Text", "tensorflow_datasets.features.Text"]
