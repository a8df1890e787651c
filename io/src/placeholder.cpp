// Placeholder: keeps sluice_io a non-empty static library until the first
// real io/src/*.cpp lands. Delete this file then.

namespace sluice::io::detail {

extern const int placeholder;
const int placeholder = 0;

}  // namespace sluice::io::detail
