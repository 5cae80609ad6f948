//! CPU feature detection.
