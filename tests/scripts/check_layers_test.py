#!/usr/bin/env python3
"""Tests of the include check (scripts/check_layers.py): it passes clean trees and fails, naming
file, line and rule, on each kind of wrong-way include planted into a fixture tree and into a
temporary copy of the real sources.

    tests/scripts/check_layers_test.py SOURCE_DIR     # ctest: include_layers_catches_wrong_way
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE_DIR = None  # set from argv


def run_check(root):
    checker = os.path.join(SOURCE_DIR, "scripts", "check_layers.py")
    p = subprocess.run([sys.executable, checker, root], capture_output=True, text=True)
    return p.returncode, p.stdout.splitlines()


def read(path):
    with open(path) as f:
        return f.read()


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


# A small tree in which every include goes down (or stays within its layer).
CLEAN = {
    "core/tensor.h": "#pragma once\n#include <vector>\n#include \"core/dtype.h\"\n",
    "core/dtype.h": "#pragma once\n",
    "core/op.h": "#pragma once\n#include \"core/tensor.h\"\n#include \"core/cuda/runtime.h\"\n",
    "core/cuda/runtime.h": "#pragma once\n#include \"core/dtype.h\"\n",
    "core/sparse/block_layout.h": "#pragma once\n#include \"core/tensor.h\"\n",
    "kernels/fill/fill.h": "#pragma once\n#include \"core/op.h\"\n",
    "kernels/add/add.cpp": "#include \"kernels/fill/fill.h\"\n#include \"core/sparse/block_layout.h\"\n",
    "core/engine/tensor_ops.cpp": "#include \"core/tensor.h\"\n#include \"kernels/fill/fill.h\"\n",
    "core/graph/graph.h": "#pragma once\n#include \"core/op.h\"\n",
    "core/io/checkpoint.h": "#pragma once\n#include \"core/graph/graph.h\"\n",
    "core/logging/svg_plot.cpp": "#include \"core/io/checkpoint.h\"\n",
    "layers/module.h": "#pragma once\n#include \"core/graph/graph.h\"\n#include \"kernels/fill/fill.h\"\n",
    "optim/optimizer.h": "#pragma once\n#include \"core/tensor.h\"\n",
    "data/dataset.h": "#pragma once\n#include \"core/tensor.h\"\n",
    "models/model_checkpoint.cpp": "#include \"layers/module.h\"\n#include \"optim/optimizer.h\"\n",
    "examples/train/train.cpp": "#include \"models/model_checkpoint.cpp\"\n#include \"data/dataset.h\"\n",
    "bench/ops.cpp": "#include \"examples/train/train.cpp\"\n",
    "core/tessera.h.in": "#include \"models/model_checkpoint.cpp\"\n",
    "tests/core/tensor_test.cpp": "#include \"gradcheck.h\"\n#include \"models/model_checkpoint.cpp\"\n",
}


class FixtureTree(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        for rel, text in CLEAN.items():
            write(self.root, rel, text)

    def tearDown(self):
        self.tmp.cleanup()

    def plant(self, rel, include):
        """Appends `#include "include"` to file `rel` (made if absent); returns its line number."""
        path = os.path.join(self.root, rel)
        old = read(path) if os.path.exists(path) else ""
        write(self.root, rel, old + f'#include "{include}"\n')
        return old.count("\n") + 1

    def assert_fails(self, rel, include, words):
        line = self.plant(rel, include)
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1, f"planted {rel} -> {include}: check passed\n" + "\n".join(out))
        self.assertEqual(len(out), 1, out)
        self.assertTrue(out[0].startswith(f'{rel}:{line}: includes "{include}"'), out[0])
        for w in words:
            self.assertIn(w, out[0])

    def test_clean_tree_passes(self):
        self.assertEqual(run_check(self.root), (0, []))

    def test_base_including_an_op_fails(self):
        self.assert_fails("core/tensor.h", "kernels/fill/fill.h", ["(ops)", "base may include only base"])

    def test_base_subfolder_including_the_engine_fails(self):
        self.assert_fails("core/sparse/block_layout.h", "core/io/checkpoint.h", ["(engine)", "base may include only"])

    def test_op_including_the_engine_fails(self):
        self.assert_fails("kernels/add/add.cpp", "core/graph/graph.h",
                          ["(engine)", "ops may include only ops and the layers below it (base)"])

    def test_engine_including_layers_fails(self):
        self.assert_fails("core/io/checkpoint.h", "layers/module.h", ["(layers)", "engine may include only"])

    def test_engine_including_optim_fails(self):
        self.assert_fails("core/logging/svg_plot.cpp", "optim/optimizer.h", ["(optim)"])

    def test_peers_including_each_other_fail(self):
        self.assert_fails("optim/optimizer.h", "layers/module.h", ["(layers)", "peers"])
        self.tearDown(), self.setUp()
        self.assert_fails("layers/module.h", "data/dataset.h", ["(data)", "peers"])

    def test_layers_including_models_fails(self):
        self.assert_fails("layers/module.h", "models/model_checkpoint.cpp", ["(models)"])

    def test_library_including_a_program_fails(self):
        self.assert_fails("models/model_checkpoint.cpp", "bench/ops.cpp", ["(programs)"])

    def test_relative_include_is_resolved(self):
        self.assert_fails("core/sparse/block_layout.h", "../../kernels/fill/fill.h", ["(ops)"])

    def test_every_wrong_include_is_reported(self):
        self.plant("core/tensor.h", "kernels/fill/fill.h")
        self.plant("core/dtype.h", "core/engine/tensor_ops.cpp")
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1)
        self.assertEqual(sorted(o.split(":")[0] for o in out), ["core/dtype.h", "core/tensor.h"])


class RealTree(unittest.TestCase):
    """The real sources, copied: clean as they are, failing once a wrong-way include is planted."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = self.tmp.name
        for top in ["core", "kernels", "layers", "optim", "data", "models", "examples", "bench", "tests"]:
            shutil.copytree(os.path.join(SOURCE_DIR, top), os.path.join(self.root, top),
                            ignore=shutil.ignore_patterns("*.o", "__pycache__", "*.h5", "*.txt.gz"))

    def tearDown(self):
        self.tmp.cleanup()

    def plant_at_line_2(self, rel, include):
        lines = read(os.path.join(self.root, rel)).split("\n")
        lines.insert(1, f'#include "{include}"')
        write(self.root, rel, "\n".join(lines))

    def test_planted_include_fails(self):
        self.assertEqual(run_check(self.root)[0], 0, "the real tree has wrong-way includes")
        self.plant_at_line_2("core/tensor.cpp", "kernels/fill/fill.h")
        self.plant_at_line_2("core/io/checkpoint.cpp", "layers/module.h")
        rc, out = run_check(self.root)
        self.assertEqual(rc, 1)
        self.assertEqual(len(out), 2, out)
        self.assertTrue(any(o.startswith('core/tensor.cpp:2: includes "kernels/fill/fill.h" (ops)') for o in out), out)
        self.assertTrue(any(o.startswith('core/io/checkpoint.cpp:2: includes "layers/module.h" (layers)') for o in out),
                        out)


if __name__ == "__main__":
    default = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    SOURCE_DIR = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else default)
    unittest.main(verbosity=2)
