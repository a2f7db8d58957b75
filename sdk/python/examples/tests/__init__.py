"""The examples' tests: cd sdk/python && python3 -m unittest discover -s examples/tests -t examples"""
