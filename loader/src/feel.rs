//! Zeebe FEEL (`=expr`) → CEL for the comparison/boolean subset (L8). Work in progress.
