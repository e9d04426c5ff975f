//! An E2B emulator: the control plane and envd, running real processes locally.
