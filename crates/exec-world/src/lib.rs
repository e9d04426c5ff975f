//! The execution world as seams: the `Fs`, `Subprocess` and `Terminal` traits, their
//! types and errors, local implementations, and the conformance suite every backend runs.
