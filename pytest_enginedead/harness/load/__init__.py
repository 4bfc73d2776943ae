"""A served engine under load: OpenAI clients, steady traffic, a supervisor that restarts it,
and the soak that holds the guard to a fault schedule.
"""
