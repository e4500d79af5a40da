"""A second distribution that installs a top-level nki or neuronxcc package (PyPI's 'nki'
placeholder, AWS's neuronx-cc) makes Python import one of the two by path order: our import
warns instead of mixing them silently."""

import os
import subprocess
import sys


def _fake_distribution(root, name, version, package):
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n")
    (root / package).mkdir()
    (root / package / "__init__.py").write_text("")


def _import_warnings(tmp_path, statement):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.getcwd(), str(tmp_path)] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
    code = ("import warnings; warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            f"    {statement}\n"
            "print([str(x.message) for x in w if x.category.__name__ == 'NkiShadowingWarning'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout


def test_neuronx_cc_beside_our_neuronxcc_warns(tmp_path):
    _fake_distribution(tmp_path, "neuronx-cc", "2.21.0", "neuronxcc")
    out = _import_warnings(tmp_path, "import neuronxcc.nki")
    assert "'neuronxcc' is provided twice" in out and "pip uninstall neuronx-cc" in out


def test_no_warning_without_another_distribution(tmp_path):
    assert _import_warnings(tmp_path, "import nki, neuronxcc.nki").strip() == "[]"
