# Every dependency comes from a Debian 12 package (scripts/install-deps.sh).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

find_package(LLVM CONFIG REQUIRED HINTS /usr/lib/llvm-19/lib/cmake/llvm NO_DEFAULT_PATH)
if(NOT LLVM_VERSION_MAJOR EQUAL 19)
  message(FATAL_ERROR "LLVM 19 required, found ${LLVM_PACKAGE_VERSION}")
endif()
find_package(xbyak CONFIG REQUIRED)
find_package(dnnl CONFIG REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(NUMA REQUIRED IMPORTED_TARGET numa)
# zenmoe serve's HTTP server (Debian builds it as a library; its flags select the same build).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)

message(STATUS "zenmoe: LLVM ${LLVM_PACKAGE_VERSION}, dnnl ${dnnl_VERSION}, xbyak ${xbyak_VERSION}")
