"""Other distributions that install a top-level ``nki`` or ``neuronxcc`` package beside this
project's: only one of two same-named packages can be imported, and which one depends on path
order, so a user would get one API or the other without knowing. Each import of ours warns once
when such a distribution is installed."""

import importlib.metadata
import os
import warnings

# distribution -> what it is
_OTHERS = {
    "nki": "the 'nki' package from PyPI (a placeholder of AWS's NKI)",
    "neuronx-cc": "AWS's Neuron compiler (neuronx-cc), whose neuronxcc.nki is AWS's own NKI",
}


class NkiShadowingWarning(UserWarning):
    """Another installed distribution provides a package of the same name as one of ours."""


def warn_if_shadowed(package, here):
    """Warns when a distribution other than this project's installs `package` (top level)."""
    for dist_name, what in _OTHERS.items():
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            continue
        files = dist.files or ()
        if not any(str(f).split("/")[0] == package for f in files):
            continue
        location = os.path.abspath(str(dist.locate_file(package)))
        if location == os.path.abspath(here):
            where = "installed over this project's own files"
        else:
            where = f"at {location}, hidden by or hiding this project's {os.path.abspath(here)}"
        warnings.warn(
            f"'{package}' is provided twice: by torch-neuronx (the simulated NeuronCore's NKI) and by "
            f"{what} ({dist_name} {dist.version}, {where}). Python imports only one of them, by "
            f"path order; uninstall {dist_name} in this environment (pip uninstall {dist_name}) or "
            "use separate environments.", NkiShadowingWarning, stacklevel=3)
