#pragma once
// read_secret_file: the transport's shared secret (transport_options::secret, hello.hpp) from a file
// that only its owner can read.
//
// Refused, with a message naming the path and the fault: a file that the group or others may read,
// write or execute (mode & 077, e.g. "mode 0644; chmod 600 it"), one that is not a regular file, an
// empty one, and one longer than the secret's limit (64 bytes). The bytes are taken as they are (a
// trailing newline is part of the secret: write it with `head -c 32 /dev/urandom > f`).
// It reads synchronously through runtime::sys(): call it at start-up, not on an executor's hot path.
//
//   std::vector<std::byte> secret = read_secret_file("/etc/sluice/secret").value();

#include <sluice/io/result.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace sluice::buffers {

inline constexpr std::size_t max_secret_bytes = 64;

io::result<std::vector<std::byte>> read_secret_file(const std::string& path);

}  // namespace sluice::buffers
