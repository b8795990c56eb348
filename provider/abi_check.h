// Whether the libibverbs that loads the provider has the layouts it was
// built for. libibverbs picks liburoce-rdmav<N>.so by its private ABI N
// alone, and N does not say everything: releases with the same N lay out
// verbs_context_ops (v34-v35 against v36 on, v59-v61 against v62-v63) and
// ibv_qp_ex (v44, v45) differently, and uroce needs v37's __verbs_log. A
// provider that registered with the wrong layout would call the wrong ops,
// so at load it compares what configure recorded (uroce_abi.h) with what
// the libibverbs shows: the release in its file's name
// (libibverbs.so.1.<api>.<release>.<minor>) and the symbols the releases
// where a layout changed added (__verbs_log in v37, ibv_query_port_speed in
// v62). On a mismatch it does not register and says why on stderr.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace uroce::abi {

// What the provider was built for (uroce_abi.h).
struct BuiltFor {
    int pabi;     // libibverbs' private ABI, IBVERBS_PRIVATE_<pabi>
    int first;    // the releases with this build's layouts: first ...
    int end;      // ... to end - 1
    int release;  // the release configured against
};

// What the libibverbs that loads the provider shows.
struct Found {
    std::string file;               // its file, symbolic links resolved
    int release = 0;                // from the file's name; 0 when it gives none
    bool verbs_log = false;         // exports __verbs_log (v37 and later)
    bool query_port_speed = false;  // exports ibv_query_port_speed (v62 and later)
};

// The rdma-core release a libibverbs file's name carries
// (".../libibverbs.so.1.14.39.0": 39), or 0.
int release_of_file(std::string_view path);

// Nothing when `found` has the layouts of `built`; otherwise the sentence
// that says what the provider was built for, what it found, and what to do.
std::optional<std::string> refusal(const BuiltFor& built, const Found& found);

// Reads the libibverbs that holds `address` (a function it exports).
Found probe(const void* address, int pabi);

}  // namespace uroce::abi
