"""Session summary of the ModuleInfo parity suite: the pass rate per sample, the largest observed
difference as a fraction of the allowed one, and the ATen ops that went to the CPU fallback."""

import torch_neuronx


def pytest_terminal_summary(terminalreporter, config):
    report = getattr(config, "_neuron_moduleinfo", None)
    if not report or not report[0]:
        return
    totals, identical, margins, inexact = report
    terminalreporter.section("ModuleInfo parity")
    samples = sum(totals.values())
    passed = sum(n for what, n in totals.items() if what.startswith("passed"))
    terminalreporter.write_line(
        f"samples: {samples}, passed {passed} ({100.0 * passed / samples:.2f}%)"
    )
    for what in sorted(totals):
        terminalreporter.write_line(f"  {what}: {totals[what]}")
    terminalreporter.write_line(
        f"passed samples compared by value and bit-identical to CPU: {identical[0]}"
    )
    for dtype in sorted(margins):
        fraction, where = margins[dtype]
        terminalreporter.write_line(
            f"largest |neuron - cpu| / allowed, {dtype}: {fraction:.3g}"
            + (f" ({where})" if fraction > 0 else "")
        )
    if config.getoption("verbose") > 0 and inexact:
        terminalreporter.write_line("passed samples that differ from CPU within the bound:")
        for name in sorted(inexact):
            count, fraction = inexact[name]
            terminalreporter.write_line(f"  {name}: {count} (largest {fraction:.3g} of allowed)")
    fallbacks = torch_neuronx.get_fallback_ops()
    terminalreporter.write_line(
        f"ATen ops that ran through the CPU fallback in this process: {len(fallbacks)}"
    )
    if config.getoption("verbose") > 0:
        for name in sorted(fallbacks):
            terminalreporter.write_line(f"  {name}")
