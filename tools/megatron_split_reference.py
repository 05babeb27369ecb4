#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""megatron_split_reference: the train/valid/test ranges megatron-core gives
for `--split`, written as the fixture tests/unit/test_split.c checks
common/split.c against.

    python3 tools/megatron_split_reference.py --megatron-core DIR \\
        [--out tests/data/megatron_split_ranges.txt] [--max-n 20000]

The fixture in the tree was produced from megatron-core 0.16.1, the wheel
megatron_core-0.16.1-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
unpacked into DIR:

    pip download --no-deps megatron-core==0.16.1 -d /tmp/mcore
    python3 -m zipfile -e /tmp/mcore/megatron_core-0.16.1-*.whl /tmp/mcore/x
    /usr/bin/python3 tools/megatron_split_reference.py --megatron-core /tmp/mcore/x

It needs numpy and torch (the builder module imports torch; nothing of
torch is used): Debian's python3-numpy and python3-torch do.

gpt_datasets() builds real GPTDatasets with megatron-core's builder from
a dataset on disk, for tests/integration/test_megatron_sequences.py to
compare loaderd's splits with when LOADERD_MEGATRON_CORE names the
unpacked wheel (the test does not need it otherwise).

The ranges are megatron-core's own code, not a rewrite of it:
BlendedMegatronDatasetConfig's parse_and_normalize_split and
convert_split_vector_to_split_matrix turn the split string into the split
matrix, and BlendedMegatronDatasetBuilder._build_megatron_dataset_splits
turns the matrix and a low-level dataset of N elements into each split's
`numpy.arange(beg, end)` of element indices (for GPTDataset the elements
are the index's sequences, numel_low_level_dataset). The builder runs
with a stand-in for the dataset class that reports N elements and keeps
the arange each split is built from; a split whose bookend has no width
(None in the matrix) is built from nothing and is written as the empty
range at its bookend's place, which is where the ranges around it meet.
The package's __init__ files (which import transformer_engine, apex and
the rest) are not run: the module files are loaded from DIR with the few
names they import from megatron.core's heavier modules (log_single_rank,
MegatronTokenizerBase, MultiStorageClientFeature) stood in for.

The fixture, plain text: `#` lines are comments; then `n MAX_N`; then
each split string is a block of whitespace-separated words (lines wrap anywhere)

    split STRING W0 W1 W2
    train SIGN GAPS...
    valid SIGN GAPS...
    test SIGN GAPS...
    end

where W0..W2 are the weights megatron-core parses from STRING (padded
with 0 to three, repr of Python floats). Over N = 0, 1, ..., max-n
elements a split ends at a boundary that is 0 at N = 0 and steps by 0
or 1 from each N to the next (the generator asserts it). SIGN `+`: the
GAPS list the N at which the boundary steps by 1, `-`: those at which
it stays, each as its distance from the previous one listed (the first
from 0); the generator writes whichever list is shorter. Every split
begins where the one before it ends (train at 0): both are
round(cum[k] * N) of the same cumulative weight, and a split
megatron-core does not build (a bookend of no width) is empty there;
the generator asserts that too. A split string whose ranges are those
of one written before is a block `split STRING W0 W1 W2` then
`same EARLIER`, without `end`.
"""

import argparse
import importlib.util
import os
import re
import sys
import types

# Split strings: Megatron-LM's defaults and common choices, and ones whose
# rounding stresses the rule (ties at N * w = k + 0.5, weights that do
# not sum to a power of two, zero weights, fewer than three weights, the
# `/` separator megatron-core's regex accepts too).
SPLITS = [
    "969,30,1", "90,5,5", "1,1,1", "949,50,1", "80,15,5", "98,2", "1", "0,1,1", "0,0,1",
    "1,0,1", "33.3,33.3,33.4", "1/1/1", "0.1,0.2,0.7", "7,2,1", "99,1,0", "3,3,3",
    "2,1,1", "1,1", "0.5,0.25,0.25", "999,1", "6,3,1", "8,1,1", "0.7,0.2,0.1", "12.5,3.75,0.05",
]


def load_megatron_core(root):
    """megatron-core's dataset modules, loaded from their files."""
    def package(name, path):
        mod = types.ModuleType(name)
        mod.__path__ = [path]
        sys.modules[name] = mod
        return mod

    core = os.path.join(root, "megatron", "core")
    package("megatron", os.path.join(root, "megatron"))
    package("megatron.core", core)
    package("megatron.core.datasets", os.path.join(core, "datasets"))

    stand_ins = {
        "megatron.core.utils": {"log_single_rank": lambda *args, **kwargs: None},
        "megatron.core.tokenizers": {"MegatronTokenizerBase": type("MegatronTokenizerBase", (), {})},
        "megatron.core.msc_utils": {"MultiStorageClientFeature": type(
            "MultiStorageClientFeature", (), {"is_enabled": staticmethod(lambda: False)})},
    }
    for name, attrs in stand_ins.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod

    def load(name):
        path = os.path.join(root, *name.split(".")) + ".py"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    for name in ("utils", "blended_megatron_dataset_config", "object_storage_utils",
                 "indexed_dataset", "megatron_dataset", "gpt_dataset", "blended_dataset",
                 "blended_megatron_dataset_builder"):
        load("megatron.core.datasets." + name)
    return (sys.modules["megatron.core.datasets.blended_megatron_dataset_config"],
            sys.modules["megatron.core.datasets.blended_megatron_dataset_builder"])


class Recorder:
    """Stands in for the builder (`self` of _build_megatron_dataset_splits)
    and for the numpy.arange it calls, keeping each split's (beg, end)."""

    def __init__(self, builder_module):
        outer = self

        class Elements:
            """A low-level dataset of n elements (GPTDataset: sequences)."""

            @staticmethod
            def build_low_level_dataset(path, config):
                return outer.n

            @staticmethod
            def numel_low_level_dataset(low_level_dataset):
                return low_level_dataset

        class Numpy:
            """The builder module's numpy, its arange's arguments kept."""

            def __getattr__(self, name):
                return getattr(real_numpy, name)

            @staticmethod
            def arange(start, stop, step, dtype):
                assert step == 1
                outer.aranges.append((start, stop))
                return real_numpy.arange(start=start, stop=stop, step=step, dtype=dtype)

        real_numpy = builder_module.numpy
        builder_module.numpy = Numpy()
        self.cls = Elements
        self.config = types.SimpleNamespace()  # not a GPTDatasetConfig: no fast_cache_load
        self.n = 0
        self.aranges = []
        self.method = builder_module.BlendedMegatronDatasetBuilder._build_megatron_dataset_splits

    def is_built_on_rank(self):
        return True

    @staticmethod
    def build_generic_dataset(cls, is_built_on_rank, synchronize_ranks, low_level_dataset, path,
                              indexed_indices, size, split, config):
        return indexed_indices

    def ranges(self, matrix, n):
        """[(beg, end)] of each split over n elements, None for a split
        megatron-core does not build (its bookend has no width)."""
        self.n = n
        self.aranges = []
        out = self.method(self, None, matrix, [None, None, None], synchronize_ranks=False)
        ranges, it = [], iter(self.aranges)
        for arange in out:
            if arange is None:
                ranges.append(None)
                continue
            beg, end = next(it)
            assert len(arange) == max(0, end - beg)
            ranges.append((beg, end))
        return ranges


def boundaries(ranges, n):
    """end(train), end(valid), end(test): each built split's end; an unbuilt
    split is empty where the one before it ends (0 for train)."""
    out, at = [], 0
    for k, r in enumerate(ranges):
        if r is not None:
            assert r[0] == at and r[1] >= r[0], "split %d over %d: %s" % (k, n, ranges)
            at = r[1]
        out.append(at)
    return out


def gpt_datasets(root, prefix, split, seq_len):
    """The train, valid and test GPTDatasets megatron-core builds from the
    Megatron dataset PREFIX with `split` (one epoch each: no sample
    budget), by its own BlendedMegatronDatasetBuilder, as
    [(samples, first sequence, end)] (None for a split not built). Needs
    the wheel's compiled helpers_cpp (for the sample index) and torch.
    The index files megatron-core caches go to a temporary directory."""
    import tempfile
    config_mod, builder_mod = load_megatron_core(root)
    datasets = os.path.join(root, "megatron", "core", "datasets")
    ext = [f for f in os.listdir(datasets) if f.startswith("helpers_cpp.") and f.endswith(".so")]
    if not ext:
        raise ImportError("%s has no compiled helpers_cpp" % datasets)
    for name, path in (("helpers_cpp", os.path.join(datasets, ext[0])),
                       ("helpers", os.path.join(datasets, "helpers.py"))):
        spec = importlib.util.spec_from_file_location("megatron.core.datasets." + name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["megatron.core.datasets." + name] = mod
        spec.loader.exec_module(mod)
        setattr(sys.modules["megatron.core.datasets"], name, mod)
    gpt = sys.modules["megatron.core.datasets.gpt_dataset"]

    class Tokenizer:
        """What GPTDatasetConfig and GPTDataset read of a tokenizer."""
        vocab_size = 1 << 20
        eod = 1
        pad = 0
        unique_identifiers = {"class": "Tokenizer"}

    with tempfile.TemporaryDirectory() as cache:
        config = gpt.GPTDatasetConfig(
            random_seed=1, sequence_length=seq_len, blend=([prefix], None), split=split,
            tokenizer=Tokenizer(), reset_position_ids=False, reset_attention_mask=False,
            eod_mask_loss=False, path_to_cache=cache)
        built = builder_mod.BlendedMegatronDatasetBuilder(
            gpt.GPTDataset, [None, None, None], lambda: True, config).build()
        return [None if d is None else (len(d), int(d.indices[0]) if len(d.indices) else None,
                                        int(d.indices[-1]) + 1 if len(d.indices) else None)
                for d in built]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megatron-core", required=True, help="the unpacked megatron-core wheel")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                  "tests", "data", "megatron_split_ranges.txt"))
    ap.add_argument("--max-n", type=int, default=20000)
    args = ap.parse_args()
    config_mod, builder_mod = load_megatron_core(args.megatron_core)
    version = "unknown"
    pkg_info = os.path.join(args.megatron_core, "megatron", "core", "package_info.py")
    if os.path.exists(pkg_info):
        info = {}
        with open(pkg_info) as f:
            exec(f.read(), info)  # noqa: S102 - the package's own version file
        version = info.get("__version__", version)
    rec = Recorder(builder_mod)
    lines = ["# megatron-core %s: the train/valid/test split boundaries of each split string" % version,
             "# for N = 1..%d elements (tools/megatron_split_reference.py writes this file" % args.max_n,
             "# and says how to read it).",
             "n %d" % args.max_n]
    written = {}  # the steps of a block written, to its split string
    for text in SPLITS:
        vector = config_mod.parse_and_normalize_split(text)
        matrix = config_mod.convert_split_vector_to_split_matrix(vector)
        weights = [float(x) for x in re.findall(r"[.0-9]+", text)]
        weights += [0.0] * (3 - len(weights))
        steps, prev = [[], [], []], [0, 0, 0]
        for n in range(1, args.max_n + 1):
            cur = boundaries(rec.ranges(matrix, n), n)
            for k in range(3):
                assert cur[k] - prev[k] in (0, 1), "%s over %d: %s after %s" % (text, n, cur, prev)
                steps[k].append(cur[k] - prev[k])
            prev = cur
        head = "split %s %s" % (text, " ".join(repr(w) for w in weights))
        key = tuple(tuple(bits) for bits in steps)
        if key in written:
            lines += [head, "same " + written[key]]
            continue
        written[key] = text
        lines.append(head)
        for name, bits in zip(("train", "valid", "test"), steps):
            # the N where the step is 1 (+) or where it is 0 (-), whichever
            # are fewer, as gaps from the previous one (from N = 0)
            sign = "+" if 2 * sum(bits) <= len(bits) else "-"
            at = [n for n, bit in enumerate(bits, 1) if bit == (1 if sign == "+" else 0)]
            row = [name, sign]
            for gap in (n - prev for n, prev in zip(at, [0] + at)):
                if sum(len(x) + 1 for x in row) + len(str(gap)) > 100:
                    lines.append(" ".join(row))
                    row = []
                row.append(str(gap))
            lines.append(" ".join(row))
        lines.append("end")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
