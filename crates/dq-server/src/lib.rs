//! dq-server
