//! dq-redis
