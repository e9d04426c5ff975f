//! envd: the daemon that runs inside every sandbox (processes, filesystem, /files).
