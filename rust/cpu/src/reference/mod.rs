//! The scalar reference implementation of every op.
