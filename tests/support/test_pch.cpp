// The translation unit that makes tests/support/test_pch.h's precompiled
// header (tests/CMakeLists.txt); it has nothing of its own.
