//! Consumers written only against the `exec-world` traits: the bash tool, a terminal
//! session and the LSP-over-stdio bridge. They run unchanged locally or in a sandbox.
