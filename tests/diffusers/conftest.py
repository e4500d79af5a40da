"""The Diffusers tests' summary: per model and dtype, the largest neuron-CPU difference against
what the dtype's rounding allows (diffusers_tolerance.py); docs/diffusers.md quotes it."""


def pytest_terminal_summary(terminalreporter, config):
    import sys

    results = {}
    for module in ("test_diffusers_models", "test_diffusers_pipelines"):
        results.update(getattr(sys.modules.get(module), "RESULTS", {}))
    if not results:
        return
    terminalreporter.section("Diffusers: neuron against CPU")
    for name, result in sorted(results.items()):
        terminalreporter.write_line(f"{name}: {result}")
