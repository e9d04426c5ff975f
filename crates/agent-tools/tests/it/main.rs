//! Every integration test of this crate in one binary (one link instead of one per file);
//! each module is what was once its own `tests/<name>.rs`. Tests that change the
//! process environment keep a binary of their own beside this one.

mod common;

mod local_bash;
mod local_lsp;
mod local_terminal;
