# Every external dependency is a Debian package installed by scripts/install-deps.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
pkg_check_modules(SQLITE3 REQUIRED IMPORTED_TARGET sqlite3)
pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET fuse3)
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
find_package(spdlog REQUIRED)
find_package(Boost REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(PkgConfig)
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)

# NTL ships no CMake or pkg-config file on Debian.
find_path(NTL_INCLUDE_DIR NTL/ZZ.h REQUIRED)
find_library(NTL_LIBRARY ntl REQUIRED)
find_library(GMP_LIBRARY gmp REQUIRED)
add_library(ntl::ntl UNKNOWN IMPORTED)
set_target_properties(ntl::ntl PROPERTIES
  IMPORTED_LOCATION "${NTL_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${NTL_INCLUDE_DIR}"
  INTERFACE_LINK_LIBRARIES "${GMP_LIBRARY};Threads::Threads")

if(S3ORAM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(S3ORAM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
