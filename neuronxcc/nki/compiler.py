"""``neuronxcc.nki.compiler`` (imported as ``ncc``): the legacy direct allocation API
(``ncc.sbuf`` / ``ncc.psum``: ``alloc``, ``mod_alloc``, ``auto_alloc``) and the kernel
decorators, from nki.legacy.allocation."""

from nki.legacy.allocation import (  # noqa: F401
    enable_stack_allocator, force_auto_alloc, psum, sbuf, skip_middle_end_transformations,
)
