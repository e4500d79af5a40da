// Stream is header-only for the submission fast path; this unit anchors it in the library.
#include "runtime/Stream.h"
