//! dq-testkit
