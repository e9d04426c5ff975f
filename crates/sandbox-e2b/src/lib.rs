//! The conversation-sandbox provider (`sandbox@1`): one E2B sandbox per conversation,
//! composed from `e2b-core`, `fs-e2b` and `subprocess-e2b`. Filled by a later issue.
