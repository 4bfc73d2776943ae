"""Tests that start real vLLM CPU engines and servers (marker ``engine``)."""
