//! ISO-8601 durations, date-times and repeating intervals for timers and q: attributes.
//! Work in progress.
