"""The EventSpace paper's experiments, rerunnable: `eventspace experiment collect|scopes|reconfigure|monitors|trees|all`."""
