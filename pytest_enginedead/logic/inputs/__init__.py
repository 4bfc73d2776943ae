"""What users give — flags, ini keys, variables, marker and factory arguments, model
directories, the guard's environment — parsed and checked before anything starts.
"""
