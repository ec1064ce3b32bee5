"""zsdr.evaluation"""
