"""A pytest plugin `make nki-library` loads into AWS's NKI library test harness: its simulation
mode reads Orchestrator._compiled_kernel, which only its compile path sets (an AttributeError in
the published harness at 2026-04-13); a class default of None lets simulation runs finish."""


def pytest_configure(config):
    try:
        from test.utils.test_orchestrator import Orchestrator
    except ImportError:
        return
    if not hasattr(Orchestrator, "_compiled_kernel"):
        Orchestrator._compiled_kernel = None
