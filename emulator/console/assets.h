// The console's page, script and style sheet, built into uroced
// (embed_assets.cmake): nothing is read from disk or fetched at run time.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

namespace uroce::console {

// (path, bytes): "/index.html", "/console.js", "/console.css".
const std::vector<std::pair<std::string_view, std::string_view>>& assets();

}  // namespace uroce::console
