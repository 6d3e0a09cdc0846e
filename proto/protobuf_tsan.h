// Force-included into every translation unit of the ThreadSanitizer build (see CMakeLists.txt).
//
// protobuf's MapFieldBase (map_field.h) adds two members when __SANITIZE_THREAD__ is defined. The
// Debian libprotobuf is not built with ThreadSanitizer, so its reflection code (TextFormat, for
// one) sees the layout without them while our instrumented code sees it with them, and text
// parsing of a map field crashes. Including map_field.h first with the macro hidden gives every
// translation unit the library's layout; instrumentation itself is unaffected.
#pragma once

#if defined(__SANITIZE_THREAD__) && defined(__cplusplus)
#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include <google/protobuf/map_field.h>
#pragma pop_macro("__SANITIZE_THREAD__")
#endif
