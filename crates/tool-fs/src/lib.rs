//! File tools (being written).
