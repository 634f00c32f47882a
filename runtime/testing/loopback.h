// Raw TCP sockets on 127.0.0.1 for the store's and the c10d client's tests: fake servers
// (one that never answers, a slow one, a 1.x agent) and raw clients (a flood of idle
// connections). Test-only; every call is a few system calls.
#ifndef OVERLAP_RUNTIME_TESTING_LOOPBACK_H_
#define OVERLAP_RUNTIME_TESTING_LOOPBACK_H_

namespace overlap {

// A socket listening on 127.0.0.1 at a port the kernel picks (backlog `backlog`), close-on-
// exec; its port in *port. -1 (errno set) on failure.
int ListenOnLoopback(int* port, int backlog = 16);

// A connection to 127.0.0.1:port, close-on-exec; -1 (errno set) on failure.
int DialLoopback(int port);

// A port nobody listens on now (bound to 0, then released; another process may take it).
int FreeLoopbackPort();

}  // namespace overlap

#endif  // OVERLAP_RUNTIME_TESTING_LOOPBACK_H_
