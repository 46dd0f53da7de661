// The headers nearly every test includes, precompiled once per build
// (tests/CMakeLists.txt, target s3oram_test_pch) and reused by each test
// binary: GoogleTest and the standard library only. Nothing of the project
// and no library whose headers read project-wide macros, so a test's own
// -D options cannot change what this header means.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>
