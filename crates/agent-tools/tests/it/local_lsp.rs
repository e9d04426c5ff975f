//! The shared lsp tests of `agent_tools::testing` against the local adapters.

use crate::common;

agent_tools::agent_tools_tests!(common::local_world, lsp);
