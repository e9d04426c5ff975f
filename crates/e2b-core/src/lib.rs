//! Our own E2B client: the control-plane REST API, envd's Connect JSON services and its
//! `/files` routes, spoken with reqwest (rustls). The [`proto`] module holds the wire types,
//! shared with the `testing-fake` emulator.

pub mod proto;
