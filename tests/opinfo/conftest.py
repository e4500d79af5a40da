"""Session summary of the OpInfo parity suite: how many samples were compared, and which ATen ops
the samples sent to the CPU fallback."""

import torch_neuronx


def pytest_terminal_summary(terminalreporter, config):
    totals = getattr(config, "_neuron_opinfo_totals", None)
    if not totals:
        return
    terminalreporter.section("OpInfo parity")
    for what in sorted(totals):
        terminalreporter.write_line(f"samples {what}: {totals[what]}")
    fallbacks = torch_neuronx.get_fallback_ops()
    terminalreporter.write_line(f"ATen ops that ran through the CPU fallback: {len(fallbacks)}")
    if config.getoption("verbose") > 0:
        for name in sorted(fallbacks):
            terminalreporter.write_line(f"  {name}")
