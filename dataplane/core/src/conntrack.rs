//! Placeholder: filled by its owner in this session.
